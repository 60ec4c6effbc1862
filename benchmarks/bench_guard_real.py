"""Guard v2's decision per free, on one SGLang release's own classes (run in a release venv).

    python -m benchmarks.bench_guard_real 0.5.9     # inside the 0.5.9 venv (rigs.venv.Venv.run)

``bench_guard.py --free-path --real`` runs it for every release family (overlays included) and
prints one table.  The rank is the guard tier's (:class:`rigs.sglang.driver.Driver`): SGLang's
allocator, request pool, Mamba pool, tree and (0.5.23) int8 checkpoint pool on a PD prefill rank,
with 16 requests finished into the tree, 4 whose KV transfer is pending on the inflight queue and
one live that matched a cached prefix, the probe attached in guard mode -- every part of the
ownership index on (tree prefix, pending transfers, the tree's insertions and own frees).  Per pool
it times, fastest of several rounds, in µs:

* **the check alone**: the wrapper's decision on a healthy free, without SGLang's free (full KV:
  a free through a held request row from the tree's prefix on, and a free of another tensor; Mamba
  and checkpoints: ids the tree does not hold, with and without a live chunked request; on 0.5.23
  the tree's own free of its value (an eviction: forgotten, no re-read));
* **the whole wrapper, on a no-op free**: guard's wrapper of the path around a free that does
  nothing, against that no-op called bare, rounds alternating: ``check`` is the difference -- all
  guard adds to one healthy free (its frame, the kill-switch read, the decision), without the
  pool's own work and its noise;
* **a pair, guard off / on**: SGLang's ``alloc`` + free on the same object, the free through the
  method SGLang's class gives (off) or through guard's wrapper of it (on), rounds alternating --
  the difference is what guard adds to one healthy free;
* **a refused free**: the wrapper's decision on a free one proof refuses, with the refusal
  recorded in the probe's repair log (the call-site capture included), SGLang's free not called.

Figures only; one JSON line per row on stdout.

Kept whole: one guarded rank of one release, built once in that release's venv, and the rows of
each pool it holds, timed the same way (:func:`fastest`, :func:`interleaved`) through the same
probe's refuser.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("SGLANG_MAMBA_SSM_DTYPE", "float32")

ROUNDS, CALLS = 7, 500


def fastest(fn: Callable[[], Any], calls: int = CALLS) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def interleaved(off: Callable[[], Any], on: Callable[[], Any]) -> tuple[float, float]:
    """Both sides' fastest round, the rounds alternating (the machine's load drifts)."""
    best = [float("inf"), float("inf")]
    for _ in range(ROUNDS):
        for side, fn in enumerate((off, on)):
            started = time.perf_counter()
            for _ in range(CALLS):
                fn()
            best[side] = min(best[side], (time.perf_counter() - started) / CALLS)
    return best[0] * 1e6, best[1] * 1e6


def row(
    release: str, pool: str, path: str, state: str, check: float, off: float | None, on: float | None
) -> None:
    doc = {
        "release": release,
        "pool": pool,
        "path": path,
        "state": state,
        "check": check,
        "off": off,
        "on": on,
    }
    print(json.dumps(doc), flush=True)


def _rank(version: str) -> Any:
    """A guarded rank of ``version`` (with its int8 checkpoint pool where the release has one): 16
    requests finished into the tree (its Mamba states and KV) and one live (``held``: its row)."""
    from rigs.sglang.driver import Driver

    d = Driver(version)
    d.new("prefill", guard=True, checkpoints=d.release.checkpoints)
    s = d.sched
    for i in range(16):
        req = d.arrive(f"t{i}", [1000 + 40 * i + k for k in range(12)])
        d.admit(req)
        d.finish(req)
    for i in range(4):  # prefilled, KV sent, the transfer pending
        req = d.arrive(f"p{i}", [3000 + 40 * i + k for k in range(12)])
        d.prefill([req])
        if not d.release.unified_tree:
            s.tree_cache.cache_unfinished_req(req)
        s.send_kv_chunk(req, last_chunk=True)
        s.disagg_prefill_inflight_queue.append(req)
    live = d.arrive("live", [*(1000 + 40 * 15 + k for k in range(12)), 7, 1, 2, 3])  # t15's prefix
    d.prefill([live])
    d.held = int(d.record(live).req_pool_idx)  # type: ignore[attr-defined]
    d.prefix = int(_probe(s).kv.prefix.owned(live))  # type: ignore[attr-defined]
    d.pending = s.disagg_prefill_inflight_queue[0]  # type: ignore[attr-defined]
    d.boundary()  # a census: the tree index
    return d


def _probe(sched: Any) -> Any:
    from poolwatch.probe.lifecycle import probe_of

    probe: Any = probe_of(sched)  # the SGLang room's probe: it carries the refuser
    assert probe is not None
    assert probe.refuser is not None
    return probe.refuser


def _original(owner: Any, name: str) -> Any:
    """The method SGLang's class gives ``owner`` (what guard wrapped on the instance)."""
    return getattr(type(owner), name).__get__(owner)


def _noop(*_: Any, **__: Any) -> None:
    return None


def added(release: str, pool: str, path: str, wrapper: Callable[[Any], Any], arg: Any, state: str) -> None:
    """All guard adds to one healthy free: its wrapper around a no-op, minus the no-op."""
    off, on = interleaved(lambda: _noop(arg), lambda: wrapper(arg))
    row(release, pool, path, f"the whole wrapper on a no-op free: {state}", on - off, off, on)


def kv_rows(release: str, rank: Any) -> None:
    """Full KV: ``rank`` holds one live request (``held``: its row, the tree owning its first
    ``prefix`` columns) and 4 pending transfers."""
    from poolwatch.model.rank import Pool

    refuser = _probe(rank.sched)
    s, r, p = rank.sched, rank.held, rank.prefix
    pool, alloc = s.req_to_token_pool, s.token_to_kv_pool_allocator
    view = pool.req_to_token[r, p : p + 8]
    bare = _original(alloc, "free")

    def pair(free: Callable[[Any], Any]) -> Callable[[], None]:
        def run() -> None:
            pool.write((r, slice(p, p + 8)), alloc.alloc(8))
            free(view)

        return run

    pairs = interleaved(pair(bare), pair(alloc.free))
    path = "token_to_kv_pool_allocator.free"
    check = fastest(lambda: refuser.kv._owned(Pool.FULL, "bench", view))
    state = f"a held row's view from the tree's {p} columns on (a release), 4 transfers pending"
    row(release, "full", path, state, check, *pairs)
    wrapper = refuser.kv._entry("free", Pool.FULL)(_noop)
    added(release, "full", path, wrapper, view, "a held row's view")
    index = refuser.kv.prefix, refuser.kv.pending
    refuser.kv.prefix = refuser.kv.pending = None  # guard v2's census-time proofs only
    added(release, "full", path, wrapper, view, "a held row's view, without the ownership index")
    refuser.kv.prefix, refuser.kv.pending = index
    other = view.clone()
    check = fastest(lambda: refuser.kv._owned(Pool.FULL, "bench", other))
    row(release, "full", path, "another tensor (an eviction)", check, None, None)
    gone = min(refuser.rows.free)  # a finished request's row, given back with its KV
    stale = pool.req_to_token[gone, :8]  # a stale pointer through it
    assert refuser.rows.released(gone)
    refused = fastest(lambda: alloc.free(stale))
    row(release, "full", path, "REFUSED: through a released row", refused, None, None)
    if p:
        prefix = pool.req_to_token[r, :p]
        refused = fastest(lambda: alloc.free(prefix))
        row(release, "full", path, f"REFUSED: the tree's {p} prefix columns (S13)", refused, None, None)
    sent = pool.req_to_token[int(rank.record(rank.pending).req_pool_idx), :8]
    refused = fastest(lambda: alloc.free(sent))
    row(release, "full", path, "REFUSED: a pending transfer's row", refused, None, None)


def mamba_rows(release: str, rank: Any, where: str, allocator: Any) -> None:
    import torch

    refuser = _probe(rank.sched)
    guard = refuser.mamba
    owner = allocator(rank.sched)
    free_id = owner.free_slots[:1].clone()
    states = len(guard.tree)
    check = fastest(lambda: guard.keep(free_id))
    bare = _original(owner, "free")
    pairs = interleaved(lambda: bare(owner.alloc(1)), lambda: owner.free(owner.alloc(1)))
    row(release, "mamba", where, f"no chunked request, {states} tree states", check, *pairs)
    added(release, "mamba", where, guard._wrap(_noop), free_id, "a free slot, 4 transfers pending")
    pending, guard.pending = guard.pending, None
    added(release, "mamba", where, guard._wrap(_noop), free_id, "a free slot, without the ownership index")
    guard.pending = pending
    chunked = rank.sched.chunked_req = _Live(free_id.clone() + 1000)
    check = fastest(lambda: guard.keep(free_id))
    row(release, "mamba", where, f"a live chunked request, {states} tree states", check, None, None)
    if refuser.request is not None:
        other = _Live(torch.tensor(5))
        check = fastest(lambda: refuser._refuse_request(other))
        row(release, "mamba", "free_mamba_cache(req)", "another request's (decision only)", check, None, None)
    live = chunked.mamba_pool_idx.reshape(1).clone()
    refused = fastest(lambda: owner.free(live))
    row(release, "mamba", where, "REFUSED: the live chunked request's slot", refused, None, None)
    if refuser.request is not None:
        refused = fastest(lambda: rank.sched.req_to_token_pool.free_mamba_cache(chunked))
        state = "REFUSED: the live chunked request"
        row(release, "mamba", "free_mamba_cache(req)", state, refused, None, None)
    rank.sched.chunked_req = None
    if guard.hooks is not None:  # from 0.5.17: the tree's own free of its value (an eviction)
        guard.hooks.freeing.calls += 1
        check = fastest(lambda: guard.keep(free_id))
        guard.hooks.freeing.calls -= 1
        row(release, "mamba", where, "the tree's own free (an eviction)", check, None, None)
    sent = rank.record(rank.pending).mamba_pool_idx.reshape(1).clone()
    refused = fastest(lambda: owner.free(sent))
    row(release, "mamba", where, "REFUSED: a pending transfer's slot", refused, None, None)
    if guard.tree:
        held = torch.tensor([next(iter(guard.tree))])
        refused = fastest(lambda: owner.free(held))
        row(release, "mamba", where, f"REFUSED: a slot the tree holds, {states} states", refused, None, None)


class _Live:
    """A chunked request as the live proof reads it (its working slot, unfinished)."""

    def __init__(self, slot: Any) -> None:
        from types import SimpleNamespace

        self.rid, self.mamba_pool_idx = "long", slot.reshape(())
        self.kv = SimpleNamespace(mamba_pool_idx=self.mamba_pool_idx)

    def finished(self) -> bool:
        return False


def measure(version: str) -> None:
    rank = _rank(version)
    kv_rows(version, rank)
    owner = "mamba_allocator" if rank.release.mamba_allocator else "mamba_pool"
    mamba_rows(version, rank, f"{owner}.free", lambda s: rank.mamba_free)
    if rank.release.checkpoints:
        ckpt_rows(version, rank)


def ckpt_rows(release: str, rank: Any) -> None:
    import torch

    guard = _probe(rank.sched).checkpoints
    ckpt = rank.sched.req_to_token_pool.mamba_ckpt_pool
    free_id = ckpt.allocator.free_slots[:1].clone()
    states = len(guard.tree)
    check = fastest(lambda: guard.keep(free_id))
    bare = _original(ckpt, "free")
    pairs = interleaved(lambda: bare(ckpt.alloc(1)), lambda: ckpt.free(ckpt.alloc(1)))
    path = "mamba_ckpt_pool.free"
    row(release, "mamba_ckpt", path, f"a slot the tree does not hold, {states} states", check, *pairs)
    added(release, "mamba_ckpt", path, guard._wrap(_noop), free_id, f"a free slot, {states} states")
    gone = int(free_id[0])  # indexed as if the tree held it at the census and evicted it since

    def evicted() -> None:
        guard.tree[gone] = None
        guard.keep(torch.tensor([gone]))

    check = fastest(evicted, 100)
    state = f"a slot the index lost track of (one re-read), {states} states"
    row(release, "mamba_ckpt", path, state, check, None, None)
    if guard.hooks is not None:  # the tree's own free of its checkpoint (an eviction)
        guard.hooks.freeing.calls += 1
        check = fastest(lambda: guard.keep(free_id))
        guard.hooks.freeing.calls -= 1
        row(release, "mamba_ckpt", path, "the tree's own free (an eviction)", check, None, None)
    held = rank.sched.tree_cache.all_mamba_values_flatten()[:1].clone()
    refused = fastest(lambda: ckpt.free(held), 100)
    row(release, "mamba_ckpt", path, f"REFUSED: a slot the tree holds, {states} states", refused, None, None)


def main(argv: list[str]) -> int:
    measure(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Guard v2 on every pool of a Mamba hybrid rank, on a release's own classes (every release of the
table, through :mod:`rigs.sglang.driver`).

Each wrong free runs in one flow three ways: the *fixed path* (the same flow without the wrong
free, guard off), guard off (the wrong free runs), guard on (it is refused).  With guard on,
SGLang's state -- what its allocators would hand out next (the free lists, in order), the request
rows, the tree's counters -- equals the fixed path's right after the wrong free and at the end,
SGLang's own idle check passes, and the only guard actions are the refusals named:

* **full KV, released row**: a finished request's KV freed again through its row after the row went
  back (a stale pointer);
* **Mamba, live**: the chunked request's working slot freed at a chunk boundary (the #12432 free:
  the row free's Mamba default up to 0.5.6, ``free_mamba_cache`` from 0.5.9);
* **Mamba, tree**: a finished request's slot, donated to the tree with its prefix, freed again
  through a stale pointer (0.5.23: the tree's value);
* **Mamba checkpoint, tree** (0.5.23, SGLang's int8 checkpoint pool): the same for a checkpoint slot.

And a long healthy flow with guard on -- prefix sharing (copy-on-write Mamba slots), chunked
prefill, decode, an abort, a retraction and its re-admission, eviction, and on a PD prefill rank
the transfer queue -- refuses nothing and repairs nothing, and SGLang's check passes at every idle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rigs.checks import report
from rigs.sglang.driver import Driver, gaps

__all__ = ["guard_pool_checks"]

Fault = Callable[[Driver, dict[str, Any]], None]


def balanced(gap: dict[str, int | None]) -> bool:
    """Every pool's gap is 0, but the unified tree's HiCache host pool's, which is read coarsely
    (size and free only: no gap to read, ``None``)."""
    return all(v == 0 or (pool == "host" and v is None) for pool, v in gap.items())


def _idle(d: Driver) -> tuple[str, dict[str, int | None]]:
    d.sched.last_batch = None
    snap = d.boundary()
    return d.idle_leak(), gaps(snap)


# -- the wrong frees ---------------------------------------------------------------------------


def _released_row(d: Driver, mark: dict[str, Any]) -> None:
    a = d.arrive("a", list(range(40, 60)))
    d.admit(a)
    d.decode()
    row, n = int(d.record(a).req_pool_idx), d.allocated(a)
    d.finish(a)
    d.boundary()
    if mark["fault"]:  # a captured row, used after the release (the row is free again)
        s = d.sched
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, :n])
    mark["after"] = d.state()
    x = d.arrive("x", list(range(70, 90)))  # takes the row and, without guard, a's slots again
    d.admit(x)
    d.decode()
    d.finish(x)


def _chunked_slot(d: Driver, mark: dict[str, Any]) -> None:
    s = d.sched
    c = d.arrive("c", list(range(200, 232)))
    for _ in range(3):
        d.prefill([c], chunk=8)
        d.boundary()
        if mark["fault"] and d.release.legacy:  # the #12432 step: the row free's Mamba default
            s.tree_cache.cache_unfinished_req(c, chunked=True)
            s.req_to_token_pool.free(c.req_pool_idx)
        else:
            d.chunk_boundary()
            if mark["fault"]:
                s.req_to_token_pool.free_mamba_cache(c)
        mark.setdefault("after", d.state())
    d.prefill_done(d.prefill([c], chunk=64))
    d.decode()
    d.finish(c)


def reuse_cached(d: Driver) -> None:
    """A second request hits a's cached state (copy on write), finishes, and the tree evicts."""
    b = d.arrive("b", [*range(500, 520), 9])  # hits a's cached state (copy on write)
    d.admit(b)
    d.decode()
    d.finish(b)
    d.evict(tokens=64, mamba=4)


def _tree_slot(d: Driver, mark: dict[str, Any], *, checkpoint: bool = False) -> None:
    s = d.sched
    a = d.arrive("a", list(range(500, 520)))
    d.admit(a)
    d.decode()
    stale = d.record(a).mamba_pool_idx
    d.finish(a)  # the tree keeps a's state (an active slot, or an int8 checkpoint slot)
    d.boundary()  # a census: the tree proof's index
    if mark["fault"]:
        pool = s.req_to_token_pool
        if d.release.unified_tree:  # the request's pointer is cleared: the tree's own value
            held = s.tree_cache.all_mamba_values_flatten()[:1].clone()
            (pool.mamba_ckpt_pool if checkpoint else pool.mamba_allocator).free(held)
        else:  # the family's Mamba free list (0.5.13 on: the slot allocator)
            d.mamba_free.free(stale.reshape(1))
    mark["after"] = d.state()
    reuse_cached(d)


def _checkpoint_slot(d: Driver, mark: dict[str, Any]) -> None:
    _tree_slot(d, mark, checkpoint=True)


FAULTS: tuple[tuple[str, str, Fault], ...] = (
    ("full", "a finished request's KV freed again through its released row", _released_row),
    ("mamba", "the live chunked request's working slot freed at a chunk boundary", _chunked_slot),
    ("mamba", "a slot the tree holds, freed through a stale pointer", _tree_slot),
)
CHECKPOINT_FAULT = (
    "mamba_ckpt",
    "an int8 checkpoint slot the tree holds, freed through a stale pointer",
    _checkpoint_slot,
)


def _run(d: Driver, fault: Fault, *, wrong: bool, guard: bool, checkpoints: bool) -> dict[str, Any]:
    d.new("prefill", guard=guard, checkpoints=checkpoints)
    mark: dict[str, Any] = {"fault": wrong, "guard": guard}  # (a flow may make its own rank)
    fault(d, mark)
    leak, gap = _idle(d)
    return {"after": mark.get("after"), "end": d.state(), "leak": leak, "gaps": gap, "actions": d.actions()}


def wrong_free_checks(d: Driver, faults: tuple[tuple[str, str, Fault, bool], ...] | None = None) -> None:
    """Each fault (pool, what, the flow, with int8 checkpoints) three ways: fixed, guard off, guard on."""
    version = d.release.version
    if faults is None:
        faults = tuple((p, w, f, False) for p, w, f in FAULTS)
        faults += ((*CHECKPOINT_FAULT, True),) if d.release.checkpoints else ()
    for pool, what, fault, ckpt in faults:  # ckpt: SGLang's int8 checkpoint pool on the rank
        runs = {
            k: _run(d, fault, wrong=k != "fixed", guard=k == "on", checkpoints=ckpt)
            for k in ("fixed", "off", "on")
        }
        fixed, off, on = runs["fixed"], runs["off"], runs["on"]
        report(
            f"{version} {pool}: {what} -- guard off changes SGLang's state (the fixed path's differs)",
            off["after"] != fixed["after"] or off["end"] != fixed["end"] or bool(off["leak"]),
            {"leak": off["leak"][:300], "gaps": off["gaps"]},
        )
        report(
            f"{version} {pool}: {what} -- guard on refuses it: SGLang's free lists, rows and tree equal the "
            "fixed path's right after it and at the end, its idle check passes, only refusals",
            on["after"] == fixed["after"]
            and on["end"] == fixed["end"]
            and not on["leak"]
            and balanced(on["gaps"])
            and {a[0] for a in on["actions"]} == {"refuse"}
            and {a[1] for a in on["actions"]} == {pool},
            {"actions": on["actions"], "leak": on["leak"][:300], "gaps": on["gaps"]},
        )


# -- the healthy long flow -----------------------------------------------------------------------


def _round(d: Driver, i: int) -> str:
    s = d.sched
    base = list(range(10 * (i % 3), 10 * (i % 3) + 12))  # three prompt families share prefixes
    a, b = d.arrive(f"a{i}", [*base, 100 + i, 7]), d.arrive(f"b{i}", [*base, 200 + i])
    d.prefill_done(d.prefill([a, b]))
    d.boundary()
    d.decode()
    c = d.arrive(f"c{i}", list(range(300 + i, 340 + i)))
    for _ in range(2):
        d.prefill([c], chunk=8)
        d.boundary()
        d.chunk_boundary()
    last = d.prefill([c], chunk=64)
    if s.disaggregation_mode.value == "prefill":  # PD prefill: the last chunk's KV is sent, then released
        d.send(c)
    else:
        d.prefill_done(last)
    d.decode()
    d.boundary()
    d.finish(a, abort=i % 2 == 0)
    d.retract(b)
    s.waiting_queue.remove(b)
    if not d.release.legacy:  # up to 0.5.6 a retracted hybrid request keeps its stale row: SGLang's
        d.admit(b)  # own match_prefix asserts on it, so it is not re-admitted
    d.decode()
    d.boundary()
    for req in list(s.running_batch.reqs):
        d.finish(req)
    if i % 2:
        d.evict(tokens=24, mamba=2)
    leak, _ = _idle(d)
    return leak


def healthy_checks(d: Driver, rounds: int = 12) -> None:
    version = d.release.version
    for mode, checkpoints in (
        ("null", False),
        ("prefill", False),
        *([("prefill", True)] if d.release.checkpoints else []),
    ):
        d.new(mode, guard=True, checkpoints=checkpoints)
        leaks = [leak for i in range(rounds) if (leak := _round(d, i))]
        _, gap = _idle(d)
        refuser = d.probe.refuser  # type: ignore[attr-defined]
        wrapped = refuser is not None and refuser.kv is not None and refuser.mamba is not None
        what = f"{mode} rank{' with int8 checkpoints' if checkpoints else ''}"
        report(
            f"{version} {what}, guard on, {rounds} rounds of prefix sharing, chunked prefill, decode, abort, "
            "retraction, eviction: zero refusals, zero repairs, SGLang's idle check passes every time",
            wrapped
            and (not checkpoints or refuser.checkpoints is not None)
            and refuser.refused == 0
            and d.actions() == []
            and leaks == []
            and all(v == 0 for v in gap.values()),
            {"actions": d.actions(), "leaks": leaks[:2], "gaps": gap, "wrapped": wrapped},
        )


def guard_pool_checks(d: Driver) -> None:
    healthy_checks(d)
    wrong_free_checks(d)

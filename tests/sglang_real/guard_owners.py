"""Guard by ownership *at the free*, on a release's own classes: what changed since the last census.

Guard v2's tree proof used to read the tree's values at the last Mamba census, so a free of a slot
the tree took after it was let through (and quarantined afterwards).  These wrong frees run with no
census between the tree taking the slot and the free, each three ways (the fixed path, guard off,
guard on; :func:`tests.sglang_real.guard_pools.wrong_free_checks`):

* **Mamba, tree since the census** (every release): a finished request's state, inserted into the
  tree at its release, freed at once (0.5.23: through the tree's own value; before, through the
  request's stale pointer: the tree took that very slot);
* **Mamba checkpoint, tree since the census** (0.5.23, int8 checkpoints): the same for the
  checkpoint slot the release committed;
* **full KV, tree prefix** (every release): a running request's prefix columns, matched from the
  tree and locked, freed through its row -- the slots S13 (#27666, PD decode radix + offload)
  frees again with ``[0, kv_allocated_len)``;
* **full KV / Mamba, pending transfer** (a PD prefill rank, every release): a request whose KV is
  on the inflight queue, still being read by the transfer engine, released early through its row
  (S20 / S21's class); the queue's own release frees it once later;
* **full KV, decode-side pending transfer** (a PD decode rank, every release): a request SGLang's
  own ``_pre_alloc`` gave a row and KV, on the transfer queue while the transfer engine writes
  them, released early through its row; the transfer lands and the request runs and is released.
"""

from __future__ import annotations

from typing import Any

from rigs.sglang.driver import Driver
from rigs.sglang.releases import ServerArgs
from tests.sglang_real.guard_pools import Fault, reuse_cached, wrong_free_checks

__all__ = ["guard_owner_checks"]


def _prefix(req: Any) -> int:
    """How many leading tokens of the request the tree matched (0.5.23: ``prefix_len``)."""
    n = getattr(req, "prefix_len", None)
    return int(n) if isinstance(n, int) else len(req.prefix_indices)


def _tree_since_census(d: Driver, mark: dict[str, Any], *, checkpoint: bool = False) -> None:
    s = d.sched
    a = d.arrive("a", list(range(500, 520)))
    d.admit(a)
    d.decode()
    stale = d.record(a).mamba_pool_idx
    d.boundary()  # the last census: a is running, the tree holds no state of it
    d.finish(a)  # the tree takes a's state now (an active slot, or an int8 checkpoint slot)
    pool = s.req_to_token_pool
    if mark["fault"] and d.release.unified_tree:  # no census between: the tree's own value
        held = s.tree_cache.all_mamba_values_flatten()[-1:].clone()
        (pool.mamba_ckpt_pool if checkpoint else pool.mamba_allocator).free(held)
    elif mark["fault"]:  # no census between: a's stale pointer (the tree took that very slot)
        d.mamba_free.free(stale.reshape(1).clone())
    mark["after"] = d.state()
    reuse_cached(d)


def _checkpoint_since_census(d: Driver, mark: dict[str, Any]) -> None:
    _tree_since_census(d, mark, checkpoint=True)


def _tree_prefix(d: Driver, mark: dict[str, Any]) -> None:
    s = d.sched
    a = d.arrive("a", list(range(40, 64)))
    d.admit(a)
    d.decode()
    d.finish(a)  # a's prompt and output are the tree's now
    d.boundary()
    b = d.arrive("b", [*range(40, 64), 7, 5, 6])  # matches a's prompt and output, and locks them
    batch = d.prefill([b])
    row, owned = int(d.record(b).req_pool_idx), _prefix(b)  # matched: the tree's, locked by b
    d.prefill_done(batch)
    if mark["fault"]:  # S13's extra free: the tree's prefix columns through b's row
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, :owned])
    assert owned > 0, "b matched nothing of a's prefix"
    mark["after"] = d.state()
    d.decode()
    d.finish(b)
    d.evict(tokens=64, mamba=4)


def _pending(d: Driver, mark: dict[str, Any], *, mamba: bool) -> None:
    s = d.sched
    c = d.arrive("c", list(range(300, 332)))
    d.prefill([c])
    if not d.release.unified_tree:  # process_batch_result_disagg_prefill caches it first
        s.tree_cache.cache_unfinished_req(c)
    s.send_kv_chunk(c, last_chunk=True)
    s.disagg_prefill_inflight_queue.append(c)  # the transfer engine reads c's KV and state now
    held = d.record(c)
    if mark["fault"] and mamba:  # c's state released while the transfer still reads it
        d.mamba_free.free(held.mamba_pool_idx.reshape(1).clone())
    elif mark["fault"]:  # c's own KV released while the transfer still reads it
        table, row = s.req_to_token_pool.req_to_token, int(held.req_pool_idx)
        s.token_to_kv_pool_allocator.free(table[row, : d.allocated(c)])
    mark["after"] = d.state()
    d.boundary()
    s.disagg_prefill_inflight_queue.remove(c)  # polled done: the queue's own release
    d.finish(c)


def _decode_pending(d: Driver, mark: dict[str, Any]) -> None:
    """A PD decode rank: the request's row and KV pre-allocated by SGLang's own ``_pre_alloc``,
    the transfer writing them while it waits on the transfer queue; a release then (the fault)
    frees slots the transfer still writes.  The transfer lands, the request joins the running batch
    and finishes (SGLang's own release)."""
    from rigs.sglang.server_args import DENSE

    server: dict[str, Any] = {"disaggregation_mode": "decode"}
    if d.release.server_args is ServerArgs.RESOLVED:
        server["model_path"] = str(DENSE)
    tree = "radix" if d.release.decode_radix else "chunk"
    d.new("decode", guard=mark["guard"], kv=256, rows=4, context=512, dense=tree, pre_alloc=8, server=server)
    d.open_decode()
    r = d.arrive("r", list(range(100, 140)), max_new=3, vocab_size=1000)
    r.sampling_params.normalize(None)
    r.output_ids.append(5)  # the first token, sampled by the prefill rank
    d.transferred(r)  # on the transfer queue: the transfer engine writes r's row now
    if mark["fault"]:  # r's KV released while the transfer still writes it
        s, row = d.sched, int(d.record(r).req_pool_idx)
        s.token_to_kv_pool_allocator.free(s.req_to_token_pool.req_to_token[row, : d.allocated(r)])
    mark["after"] = d.state()
    d.loop()
    d.prebuilt([r])  # the transfer landed: off the queue, into the running batch
    d.loop()
    d.finish(r)  # SGLang's own release of the finished request


def _pending_kv(d: Driver, mark: dict[str, Any]) -> None:
    _pending(d, mark, mamba=False)


def _pending_mamba(d: Driver, mark: dict[str, Any]) -> None:
    _pending(d, mark, mamba=True)


FAULTS: tuple[tuple[str, str, Fault, bool], ...] = (  # pool, what, the flow, int8 checkpoints
    ("mamba", "a slot the tree took since the last census, freed at once", _tree_since_census, False),
    (
        "full",
        "the tree's prefix columns of a running request freed through its row (S13)",
        _tree_prefix,
        False,
    ),
    ("full", "a request's KV freed while its PD transfer is pending", _pending_kv, False),
    ("mamba", "a request's Mamba slot freed while its PD transfer is pending", _pending_mamba, False),
    (
        "full",
        "a PD decode request's pre-allocated KV freed while its transfer is pending",
        _decode_pending,
        False,
    ),
)
CHECKPOINTS: tuple[tuple[str, str, Fault, bool], ...] = (
    (
        "mamba_ckpt",
        "an int8 checkpoint slot the tree took since the last census, freed at once",
        _checkpoint_since_census,
        True,
    ),
)


def guard_owner_checks(d: Driver) -> None:
    faults = (*FAULTS, *(CHECKPOINTS if d.release.checkpoints else ()))
    wrong_free_checks(d, faults)

"""An independent account of what every emulated rank's pools hold, computed by walking the
scheduler's queues the way the reference (§3.2-§3.3) says a watcher must, not by asking the
emulator's own bookkeeping."""

from __future__ import annotations

from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, Pool, PoolAccount


def live_requests(rank: Any) -> list[Any]:
    reqs = list(rank.running_batch.reqs)
    if rank.last_batch is not None:
        reqs += rank.last_batch.reqs
    if rank.chunked_req is not None:
        reqs.append(rank.chunked_req)
    reqs += rank.disagg_prefill_inflight_queue
    reqs += [d.req for d in rank.disagg_decode_transfer_queue.queue]
    if rank.disaggregation_mode == "decode":
        reqs += rank.waiting_queue
    unique = {id(r): r for r in reqs if not r.finished()}
    unique.update({id(r): r for r in offloading(rank)})  # finished, holding until their KV is on the host
    return list(unique.values())


def offloading(rank: Any) -> list[Any]:
    """Finished PD decode requests kept while their KV is offloaded (``ongoing_offload``)."""
    manager = getattr(rank, "decode_offload_manager", None)
    return [] if manager is None else [entry[0] for entry in manager.ongoing_offload.values()]


def _has_row(rank: Any, req: Any) -> bool:
    if req.req_pool_idx is None:
        return False
    if req is rank.chunked_req and rank.release.name == "0.5.4.post1":
        # 0.5.4 frees the chunked request's row at each boundary; it has one only while the
        # chunk just run is in last_batch
        return rank.last_batch is not None and any(r is req for r in rank.last_batch.reqs)
    return True


def _tree_part(rank: Any, req: Any) -> int:
    """What of a live request's KV the cache counts: the tree's prefix, or on a 0.5.4 decode rank
    the prebuilt KV ChunkCache counts as protected."""
    if getattr(rank.tree_cache, "counts_protected", False):
        return len(req.prefix_indices)
    return int(req.cache_protected_len)


def held(rank: Any) -> dict[Pool, int]:
    ps = rank.page_size
    live = live_requests(rank)
    full = sum(-(-r.kv_allocated_len // ps) * ps - _tree_part(rank, r) for r in live)
    mamba_holders = {id(r): r for r in live}
    if rank.disaggregation_mode != "decode":
        mamba_holders.update({id(r): r for r in rank.waiting_queue if not r.finished()})
    mamba = sum(1 for r in mamba_holders.values() if r.mamba_pool_idx is not None)
    rows = sum(1 for r in live if _has_row(rank, r))
    return {Pool.FULL: full, Pool.SWA: full, Pool.MAMBA: mamba, Pool.REQ: rows}


def accounts(rank: Any) -> dict[Pool, PoolAccount]:
    """Exact accounts of every pool of ``rank`` at a loop boundary."""
    h = held(rank)
    alloc, tree, pool = rank.token_to_kv_pool_allocator, rank.tree_cache, rank.req_to_token_pool
    tree_on = tree.is_tree_cache()
    swa = hasattr(alloc, "swa_attn_allocator")
    out: dict[Pool, PoolAccount] = {}
    full_ev = tree.tree.full_evictable_size_ if tree_on else 0
    full_pr = tree.tree.full_protected_size_ if tree_on else tree.protected_size()
    full_av = alloc.full_available_size() if swa else alloc.available_size()
    out[Pool.FULL] = _acc(Pool.FULL, alloc.size, full_av, full_ev, full_pr, h[Pool.FULL])
    if swa:
        out[Pool.SWA] = _acc(
            Pool.SWA, alloc.size_swa, alloc.swa_available_size(), full_ev, full_pr, h[Pool.SWA]
        )
    mp = getattr(pool, "mamba_pool", None)
    if mp is not None:
        m_ev = tree.tree.mamba_evictable_size_ if tree_on else 0
        m_pr = tree.tree.mamba_protected_size_ if tree_on else 0
        out[Pool.MAMBA] = _acc(Pool.MAMBA, mp.size, mp.available_size(), m_ev, m_pr, h[Pool.MAMBA])
    size = pool.size + pool.pre_alloc_size
    out[Pool.REQ] = _acc(Pool.REQ, size, len(pool.free_slots), 0, 0, h[Pool.REQ])
    host = getattr(tree, "token_to_kv_pool_host", None)
    if host is not None:  # HiCache: every host slot is free or a tree node's copy (nothing in flight)
        cached = sum(len(n.host_value) for n in tree.tree.nodes() if n.host_value is not None)
        out[Pool.HOST] = _acc(Pool.HOST, host.size, len(host.free_slots), cached, 0, 0)
    return out


def _acc(p: Pool, size: int, av: int, ev: int, pr: int, held_: int) -> PoolAccount:
    return PoolAccount(p, size, av, ev, pr, held_, 0, exactness=Exactness.EXACT)


def gaps(rank: Any) -> dict[Pool, int]:
    """The signed gap of every pool (0 = balanced, < 0 surplus, > 0 deficit)."""
    out = {}
    for p, a in accounts(rank).items():
        g = gap(a)
        assert g is not None
        out[p] = g
    return out


def encoder_gap(rank: Any) -> int | None:
    """The encoder cache's gap (0 balanced, < 0 surplus), or None without one: a multimodal cache's
    free slots plus its entries' embeds, an encoder-decoder cache's free slots plus what it has
    allocated and not credited back, against ``cache_size``; and ``num_freeable_slots`` against the
    free slots plus the reclaimable entries."""
    m = getattr(rank, "encoder_cache_manager", None)
    if m is None:
        return None
    if hasattr(m, "emu_outstanding"):
        return int(m.cache_size - m.num_free_slots - sum(m.emu_outstanding.values()))
    held = sum(m.num_embeds_by_hash[h] for h in m.cached)
    freeable = m.num_free_slots + sum(m.freeable.values())
    return int(m.cache_size - m.num_free_slots - held) or int(freeable - m.num_freeable_slots)


def imbalances(cluster: Any) -> list[str]:
    """Every non-zero gap in the cluster, as readable strings (empty when all balanced)."""
    bad = []
    for w in cluster.workers:
        for r in w.ranks:
            for p, g in gaps(r).items():
                if g:
                    bad.append(f"{w.name} dp{r.dp_rank} tp{r.tp_rank} {p.value}: gap {g}")
            if encoder_gap(r):
                bad.append(f"{w.name} dp{r.dp_rank} tp{r.tp_rank} encoder: gap {encoder_gap(r)}")
    return bad

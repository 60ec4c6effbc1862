"""What the emulator knows about a rank that a watcher has to infer: the ground truth of the blind
classes (the books balance, or only a counter lies), for the demo's narration and the tests.

* :func:`stranded` -- capacity held by owners that no longer progress: a prefill's request kept
  for a transfer its decode side dropped, a decode's request waiting for KV its prefill side
  dropped, a finished request whose offload ack is left unchecked, write-through locks whose
  copies are done but whose acks nobody drained;
* :func:`counter_drift` -- each counter of the prefix cache against what the tree (or the live
  requests, for 0.5.4's ChunkCache) says it should be;
* :func:`lock_deficit` -- tree nodes locked fewer times than the live requests and writes that
  hold them (a ``dec_lock_ref`` without its ``inc``), and :func:`prefix_freed` -- what such an
  unlocked prefix loses to eviction while a live request still reads it;
* :func:`encoder_state` -- the encoder cache's free slots against its size, and the slots only
  waiting requests reference.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["Hold", "counter_drift", "encoder_state", "lock_deficit", "prefix_freed", "stranded"]


@dataclass(frozen=True, slots=True)
class Hold:
    owner: str  # a request id, or "write-through" for a tree node's write lock
    where: str  # the queue or table that holds it
    tokens: int  # full-KV tokens it keeps (its private KV and the prefix only its lock keeps)
    since: float  # simulated seconds: when it stopped progressing


def stranded(rank: Any) -> list[Hold]:
    """Holders that will not progress on their own (see the module doc)."""
    out = [
        Hold(
            r.rid, "disagg_prefill_inflight_queue", int(r.kv_allocated_len), r.transfer.prefill_done_at or 0.0
        )
        for r in rank.disagg_prefill_inflight_queue
        if r.transfer is not None and r.transfer.decode_lost
    ]
    out += [
        Hold(d.req.rid, "disagg_decode_transfer_queue", int(d.req.kv_allocated_len), d.emu_waiting_since)
        for d in rank.disagg_decode_transfer_queue.queue
        if d.req.transfer is not None and d.req.transfer.prefill_lost
    ]
    now = rank.clock.now  # a copy queued before this iteration has had its ack checked by now
    manager = getattr(rank, "decode_offload_manager", None)
    if manager is not None:
        out += [
            Hold(req.rid, "decode_offload_manager.ongoing_offload", int(req.kv_allocated_len), start)
            for req, _, _, start in manager.ongoing_offload.values()
            if start < now
        ]
    tree = rank.tree_cache
    queued = getattr(tree, "emu_queued_at", {})
    if rank.running_batch.reqs:  # decoding: 0.5.10+ drains every step
        out += [
            Hold("write-through", f"tree node {i}", len(n.key), queued[i])
            for i, n in getattr(tree, "ongoing_write_through", {}).items()
            if queued.get(i, now) < now
        ]
    return out


def counter_drift(rank: Any) -> dict[str, int]:
    """Counter name -> counter minus truth, for every counter that is off (empty: none is)."""
    tree = rank.tree_cache
    if not tree.is_tree_cache():
        if not getattr(tree, "counts_protected", False):
            return {}
        live = [r for r in rank.running_batch.reqs if not r.finished()]
        live += [r for r in (rank.last_batch.reqs if rank.last_batch else []) if not r.finished()]
        live += [entry[0] for entry in getattr(rank.decode_offload_manager, "ongoing_offload", {}).values()]
        truth = sum(len(r.prefix_indices) for r in {id(r): r for r in live}.values())
        off = int(tree.protected_size_) - truth
        return {"protected_size_": off} if off else {}
    evictable = protected = 0
    for node in tree.tree.nodes():
        if node is tree.root_node:
            continue
        if node.full_lock_ref > 0:
            protected += len(node.key)
        else:
            evictable += len(node.key)
    drift: dict[str, int] = {
        "full_evictable_size_": tree.tree.full_evictable_size_ - evictable,
        "full_protected_size_": tree.tree.full_protected_size_ - protected,
    }
    return {name: d for name, d in drift.items() if d}


def lock_deficit(rank: Any) -> int:
    """Tokens of tree nodes locked fewer times than their lockers (live requests' last nodes and
    their ancestors, and write-through copies not yet acked)."""
    tree = rank.tree_cache
    if not tree.is_tree_cache():
        return 0
    lockers: Counter[int] = Counter()
    holders = [r.last_node for r in rank.running_batch.reqs if not r.finished()]
    holders += [r.last_node for r in rank.disagg_prefill_inflight_queue]
    if rank.chunked_req is not None:
        holders.append(rank.chunked_req.last_node)
    holders += list(getattr(tree, "ongoing_write_through", {}).values())
    for held in holders:
        node = held
        while node is not None and node is not tree.root_node:
            lockers[id(node)] += 1
            node = node.parent
    return sum(
        len(n.key) for n in tree.tree.nodes() if n is not tree.root_node and n.full_lock_ref < lockers[id(n)]
    )


def prefix_freed(rank: Any) -> int:
    """Prefix slots live requests still read (``[0, cache_protected_len)`` of their rows) that the
    tree no longer holds: freed while in use, and maybe handed to another request."""
    tree = rank.tree_cache
    if not tree.is_tree_cache():
        return 0
    held = set(tree.all_values_flatten().tolist())
    table = rank.req_to_token_pool.req_to_token
    live = [r for r in rank.running_batch.reqs if not r.finished() and r.req_pool_idx is not None]
    return sum(
        sum(1 for s in table[r.req_pool_idx, : r.cache_protected_len].tolist() if s not in held) for r in live
    )


def encoder_state(rank: Any) -> tuple[int, int, int] | None:
    """``(num_free_slots, cache_size, slots referenced only by waiting requests)``, or None."""
    m = getattr(rank, "encoder_cache_manager", None)
    if m is None:
        return None
    waiting = {r.rid for r in rank.waiting_queue}
    pinned = sum(
        m.num_embeds_by_hash.get(h, 0)
        for h, refs in getattr(m, "cached", {}).items()
        if refs and refs <= waiting
    )
    return int(m.num_free_slots), int(m.cache_size), pinned

"""The identity census of the Mamba pool: which slot ids are free, in the tree and held by live requests.

Counting (``readers``) proves *that* a pool is out of balance; the census names *which* slots.
For the Mamba pool (hundreds to a few thousand slots) the three id sets are pulled to the host:

* ``F`` the free list (``mamba_pool.free_slots``, 0.5.23 ``mamba_allocator.free_slots``);
* ``T`` the tree's ``mamba_value``s; ``Q`` the live requests' working and ping-pong slots.

With int8 Mamba checkpoints (0.5.17 on, ``req_to_token_pool.mamba_ckpt_pool``) the tree's values are
checkpoint slots: the active pool's census has no ``T``, and the checkpoint pool gets a census of its
own (:func:`checkpoint_census`, pool ``mamba_ckpt``): ``F`` its allocator's free list, ``T`` the tree's
values, no ``Q`` (no request holds a checkpoint slot: a commit the tree did not take is freed at
once), ids ``1..num_slots`` -- the same findings, by slot id, as the active pool's.

What these sets prove, and when, is :mod:`poolwatch.probe.census.proofs`; the full-KV census
(:mod:`poolwatch.probe.sglang.kv_census`) does the same on the GPU and reads the tree with the helpers
here.  These reads synchronise with the GPU: a low rate, at idle and after the hooks that need them.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import replace
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import Owners, PoolCensus, busy_lost, id_census
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.counter_census import mamba_readings
from poolwatch.probe.sglang.footprint import mamba_slot_objects
from poolwatch.probe.sglang.nodes import tree_root
from poolwatch.probe.sglang.pool_terms import checkpoint_pool
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.sessions import mamba_ids
from poolwatch.probe.sglang.shapes import HeldRule, Shape
from poolwatch.probe.sglang.totals import mamba_holders

__all__ = ["checkpoint_census", "mamba_census", "mamba_free_list", "rid_of", "tree_is_empty", "tree_values"]


def _flat_ids(tensors: list[Any]) -> tuple[list[int], list[int]]:
    """Every id of ``tensors`` in one host transfer, and how many each tensor has.  One
    ``torch.cat`` call when they are all 1-d (the usual case: a per-tensor reshape and cast cost
    more than the census arithmetic), else each is flattened first."""
    import torch

    if not tensors:
        return [], []
    try:
        joined = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        if joined.dim() != 1:
            raise ValueError("not 1-d")
        lengths = [int(t.shape[0]) for t in tensors]
    except (RuntimeError, ValueError, TypeError, IndexError):  # 0-d or n-d tensors
        flat = [t.reshape(-1) for t in tensors]
        joined, lengths = torch.cat(flat), [int(t.shape[0]) for t in flat]
    return [int(i) for i in joined.to(torch.int64).tolist()], lengths


def mamba_free_list(sched: Any, shape: Shape, reading: Reading) -> Any:
    owner = "mamba_allocator" if shape.mamba_allocator else "mamba_pool"
    return reading.attr(sched, f"req_to_token_pool.{owner}.free_slots")


def tree_is_empty(tree_cache: Any) -> bool:
    """Whether the prefix tree owns nothing: its root has no child (a tree walkable from Python),
    else its counters say so (no tensor is read).  The structure decides where it can: a census
    must not believe the counters it checks (a hand-subtracted ``protected_size_`` makes a tree
    holding locked nodes look empty, #27666)."""
    children = getattr(tree_root(tree_cache), "children", None)
    if children is not None:
        try:
            return len(children) == 0
        except TypeError:
            pass
    total = 0
    for name in ("full_evictable_size", "full_protected_size", "evictable_size", "protected_size"):
        fn = getattr(tree_cache, name, None)
        try:
            value = fn() if callable(fn) else 0
        except Exception:  # e.g. MambaRadixCache.evictable_size() raises NotImplementedError
            continue
        total += value if isinstance(value, int) else 0
    return total == 0


def tree_values(tree_cache: Any, flatten_name: str, attr: str) -> list[Any]:
    """The tree's value tensors: SGLang's own flatten helper, or a walk of the nodes (0.5.4's
    Mamba values; a HiCache tree with nodes evicted to host, whose ``value`` is None).  SGLang's
    helpers cannot concatenate an empty tree, hence the check."""
    if tree_is_empty(tree_cache):
        return []
    flatten = getattr(tree_cache, flatten_name, None)
    if callable(flatten):
        try:
            return [flatten()]
        except (RuntimeError, TypeError):  # nodes, but none with such a value (SGLang's cat of
            pass  # nothing), or a node whose value is gone (HiCache: evicted to host) -- walk them
    root = tree_root(tree_cache)
    if root is None:  # a ChunkCache (PD decode): no tree; 0.5.4's counts live requests' KV as protected
        return []
    values, stack = [], [root]
    while stack:
        node = stack.pop()
        value = getattr(node, attr, None)
        if value is not None and node is not root:
            values.append(value)
        stack.extend(node.children.values())
    return values


def rid_of(req: Any) -> str:
    return str(getattr(req, "rid", "") or f"req@{id(req):x}")


def _live_mamba(live: LiveSet, shape: Shape) -> Owners:
    """``(request id, Mamba slot ids)`` of every live request, read with one host transfer, and of
    every parked streaming-session slot (``session:<id>``, :mod:`~poolwatch.probe.sglang.sessions`)."""
    fast = None
    if shape.held_rule is not HeldRule.REQ_KV:
        try:
            fast = _single_slot_owners(live, shape)
        except Exception:  # an odd request: the per-request path reads (and names) it
            fast = None
    owners = fast if fast is not None else _live_mamba_each(live, shape)
    return [*owners, *_session_mamba(live)] if live.sessions else owners


def _session_mamba(live: LiveSet) -> list[tuple[str, list[int]]]:
    """``(session:<id>, Mamba slot ids)`` of the parked session slots, in one host transfer."""
    slots = [(name, mamba_ids(record)) for name, record in live.sessions]
    ids, lengths = _flat_ids([t for _, ts in slots for t in ts])
    out, at, each = [], 0, iter(lengths)
    for name, tensors in slots:
        n = sum(next(each) for _ in tensors)
        if n:
            out.append((name, ids[at : at + n]))
        at += n
    return out


def _single_slot_owners(live: LiveSet, shape: Shape) -> Owners | None:
    """At C speed when every Mamba holder has one working slot (no ping-pong buffer) and its own
    request id; ``None`` otherwise (then each request is read on its own)."""
    holders = mamba_holders([*live.holders, *live.waiting])
    if shape.has_ping_pong:
        buffers = map(
            getattr, holders, itertools.repeat("mamba_ping_pong_track_buffer"), itertools.repeat(None)
        )
        if any(map(operator.is_not, buffers, itertools.repeat(None))):
            return None
    raw = list(map(operator.attrgetter("rid"), holders))
    rids = list(map(str, raw))
    if not all(raw) or len(set(rids)) != len(rids):
        return None
    ids, lengths = _flat_ids(list(map(operator.attrgetter("mamba_pool_idx"), holders)))
    if lengths.count(1) != len(lengths):
        return None
    return list(zip(rids, zip(ids), strict=True))


def _live_mamba_each(live: LiveSet, shape: Shape) -> list[tuple[str, list[int]]]:
    reqs = [(rid_of(r), mamba_slot_objects(r, shape)) for r in (*live.holders, *live.waiting)]
    owners = [(rid, t) for rid, ts in reqs for t in ts if t is not None]
    ids, lengths = _flat_ids([t for _, t in owners])
    out: dict[str, list[int]] = {}
    at = 0
    for (rid, _), n in zip(owners, lengths, strict=True):
        out.setdefault(rid, []).extend(ids[at : at + n])
        at += n
    return list(out.items())


def _free_and_tree(free: Any, tree: list[Any]) -> tuple[list[int], list[int]]:
    """The free list's ids and the tree's, read in one host transfer (on a GPU each transfer
    synchronises with the device)."""
    ids, lengths = _flat_ids([free, *(t for t in tree if t is not None)])
    return ids[: lengths[0]], ids[lengths[0] :]


def mamba_census(
    sched: Any, shape: Shape, reading: Reading, live: LiveSet, *, idle: bool, lost: int | None = None
) -> PoolCensus | None:
    """The Mamba census, or ``None`` when this rank has no Mamba pool or it cannot be read.
    ``lost``: the sample's exact deficit while busy (the slots in no set are then named when they
    account for exactly that deficit, :func:`~poolwatch.probe.census.proofs.busy_lost`)."""
    free = mamba_free_list(sched, shape, reading)
    size = reading.int_of(reading.attr(sched, "req_to_token_pool.mamba_pool.size"), "mamba.size")
    if free is MISSING or size is None:
        return None
    tree_cache = reading.attr(sched, "tree_cache")
    checkpoints = checkpoint_pool(sched, reading) is not None
    if checkpoints:  # the tree's values are checkpoint slots, not these
        values: list[Any] | None = []
    else:
        values = reading.guard(
            "census.mamba.tree",
            lambda: tree_values(tree_cache, "all_mamba_values_flatten", "mamba_value"),
            None,
        )
    queue = reading.guard("census.mamba.live", lambda: _live_mamba(live, shape), None)
    if values is None or queue is None:
        return None
    sets = reading.guard("census.mamba.free", lambda: _free_and_tree(free, values), None)
    if sets is None:
        return None
    free_ids, tree = sets
    first = shape.mamba_first_id
    census = id_census(
        Pool.MAMBA, size, first, free_ids, tree, (), check_missing=idle or bool(lost), owners=queue
    )
    if not checkpoints:  # the tree's Mamba counters against its nodes by lock (the counter witness)
        counted = reading.guard("census.mamba.counters", lambda: mamba_readings(sched, reading), None)
        census = replace(census, counter_readings=counted or ())
    if idle or census.missing_count is None or busy_lost(census.missing_count, 1, lost):
        return census
    return replace(census, missing=None, missing_count=None, missing_ids=())


def checkpoint_census(
    sched: Any, reading: Reading, *, idle: bool, lost: int | None = None
) -> PoolCensus | None:
    """The int8 checkpoint pool's census (0.5.23), or ``None`` when there is no such pool or it
    cannot be read: its free list against the tree's Mamba values, which are its slot ids."""
    ckpt = checkpoint_pool(sched, reading)
    if ckpt is None:
        return None
    free = reading.attr(ckpt, "allocator.free_slots")
    size = reading.int_of(reading.attr(ckpt, "num_slots"), "mamba_ckpt.size")
    if free is MISSING or size is None:
        return None
    tree_cache = reading.attr(sched, "tree_cache")
    values = reading.guard(
        "census.mamba_ckpt.tree",
        lambda: tree_values(tree_cache, "all_mamba_values_flatten", "mamba_value"),
        None,
    )
    sets = (
        None
        if values is None
        else reading.guard("census.mamba_ckpt.free", lambda: _free_and_tree(free, values), None)
    )
    if sets is None:
        return None
    free_ids, tree = sets
    census = id_census(Pool.MAMBA_CKPT, size, 1, free_ids, tree, (), check_missing=idle or bool(lost))
    if idle or census.missing_count is None or busy_lost(census.missing_count, 1, lost):
        return census
    return replace(census, missing=None, missing_count=None, missing_ids=())

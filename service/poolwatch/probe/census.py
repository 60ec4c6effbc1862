"""The identity census: which slot ids are free, in the tree and held by live requests.

Counting (``readers``) proves *that* a pool is out of balance; the census names *which* slots.
For the Mamba pool (hundreds to a few thousand slots) the three id sets are pulled to the host:

* ``F`` the free list (``mamba_pool.free_slots``, 0.5.23 ``mamba_allocator.free_slots``);
* ``T`` the tree's ``mamba_value``s; ``Q`` the live requests' working and ping-pong slots.

A duplicate in ``F``, ``F & Q`` (the seed: the chunked request's slot is on the free list),
``F & T``, more free ids than the pool has, and ids outside the pool's range (``0..size-1`` up to
0.5.6, ``1..size`` from 0.5.9) are proofs at any moment.  So is the damage a double free does
once the slot is handed out again: one slot held by *two* live requests (``LIVE_SHARED``, with
both request ids), or by a live request and a tree node (``LIVE_AND_TREE``: no known release lets
an unfinished request's working Mamba slot be a tree value; the tree gets a copy).  Ids in none
of the sets (``MISSING``) are only reported at idle, when nobody may legitimately hold a slot the
probe does not see.

The full-KV census (:mod:`poolwatch.probe.kv_census`) does the same with GPU-side set operations.
These reads synchronise with the GPU, so they run at a low rate, at idle and after the hooks that
need them, never on every sample.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from poolwatch.model import Pool, Tripwire, TripwireKind
from poolwatch.probe.access import MISSING, Reading
from poolwatch.probe.requests import LiveSet, mamba_slot_objects
from poolwatch.probe.shapes import HeldRule, Shape
from poolwatch.probe.totals import mamba_holders

__all__ = [
    "MAX_IDS",
    "MAX_RETURN",
    "Owners",
    "PoolCensus",
    "id_census",
    "mamba_census",
    "rid_of",
    "mamba_free_list",
    "tree_is_empty",
    "tree_values",
]

MAX_IDS = 64  # slot ids named per finding; the counts are always complete
MAX_RETURN = 1 << 16  # missing ids kept (unnamed) for the guard to give back at idle
Owners = Sequence[tuple[str, Sequence[int]]]  # (request id, the slot ids it holds), per live request


@dataclass(frozen=True, slots=True)
class PoolCensus:
    """The identity census of one pool."""

    pool: Pool
    size: int
    first_id: int
    free: int  # entries on the free list(s), duplicates included
    tree: int
    live: int
    duplicates: tuple[int, ...]
    free_and_live: tuple[int, ...]
    free_and_tree: tuple[int, ...]
    out_of_range: tuple[int, ...]
    missing: tuple[int, ...] | None  # None: not checked (busy)
    missing_count: int | None = None
    live_shared: tuple[int, ...] = ()  # held by two or more live requests
    live_and_tree: tuple[int, ...] = ()  # held by a live request and owned by a tree node
    owners: Mapping[int, tuple[str, ...]] = field(default_factory=dict)  # flagged slot -> request ids
    missing_ids: tuple[int, ...] = ()  # every missing id (up to MAX_RETURN), for the guard only

    def requests_of(self, slots: Iterable[int]) -> tuple[str, ...]:
        """The live requests holding any of ``slots`` (in slot order, each once)."""
        return tuple(dict.fromkeys(r for s in slots for r in self.owners.get(s, ())))

    def tripwires(self, hook: str, seq: int) -> tuple[Tripwire, ...]:
        found = [
            (TripwireKind.FREE_DUPLICATE, self.duplicates),
            (TripwireKind.FREE_AND_LIVE, self.free_and_live),
            (TripwireKind.FREE_AND_TREE, self.free_and_tree),
            (TripwireKind.OUT_OF_RANGE, self.out_of_range),
            (TripwireKind.MISSING, self.missing or ()),
            (TripwireKind.LIVE_AND_TREE, self.live_and_tree),
        ]
        out = [Tripwire(k, self.pool, ids, hook, seq, self.requests_of(ids)) for k, ids in found if ids]
        for slot in self.live_shared:  # one finding per shared slot, naming every holder
            out.append(Tripwire(TripwireKind.LIVE_SHARED, self.pool, (slot,), hook, seq, self.owners[slot]))
        if self.free > self.size:
            out.append(Tripwire(TripwireKind.OVER_SIZE, self.pool, self.duplicates, hook, seq))
        return tuple(out)


def _cap(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(ids)[:MAX_IDS])


def _holders(owners: Owners) -> dict[int, tuple[str, ...]]:
    single = _single_holders(owners)
    if single is not None:
        return single
    held: dict[int, list[str]] = {}
    for rid, ids in owners:
        for slot in dict.fromkeys(ids):
            held.setdefault(slot, []).append(rid)
    return {slot: tuple(rids) for slot, rids in held.items()}


def _single_holders(owners: Owners) -> dict[int, tuple[str, ...]] | None:
    """The usual case at C speed: every owner holds one slot and no slot has two owners (else
    ``None``: the general path)."""
    slot_lists = list(map(operator.itemgetter(1), owners))
    if list(map(len, slot_lists)).count(1) != len(slot_lists):
        return None
    slots = list(map(operator.itemgetter(0), slot_lists))
    held = dict(zip(slots, zip(map(operator.itemgetter(0), owners)), strict=True))
    return held if len(held) == len(slots) else None


def id_census(
    pool: Pool,
    size: int,
    first: int,
    free: Sequence[int],
    tree: Sequence[int],
    live: Sequence[int],
    *,
    check_missing: bool,
    owners: Owners = (),
) -> PoolCensus:
    """The census arithmetic on plain id lists (pure; also used by the tests and the KV census).
    ``owners`` names the live requests behind ``live`` (then ``live`` may be empty)."""
    counts = Counter(free)
    held = _holders(owners)
    free_set, tree_set, live_set = set(counts), set(tree), set(live) | set(held)
    expected = range(first, first + size)
    missing = None
    if check_missing:
        seen = free_set | tree_set | live_set
        missing = tuple(i for i in expected if i not in seen)
    shared = _cap(s for s, rids in held.items() if len(rids) > 1)
    live_tree = _cap(set(held) & tree_set)
    flagged = set(shared) | set(live_tree) | (free_set & set(held))
    return PoolCensus(
        pool=pool,
        size=size,
        first_id=first,
        free=len(free),
        tree=len(tree),
        live=len(live) + sum(map(len, map(operator.itemgetter(1), owners))),
        duplicates=_cap(i for i, n in counts.items() if n > 1),
        free_and_live=_cap(free_set & live_set),
        free_and_tree=_cap(free_set & tree_set),
        out_of_range=_cap(i for i in free_set if not first <= i < first + size),
        missing=None if missing is None else missing[:MAX_IDS],
        missing_count=None if missing is None else len(missing),
        live_shared=shared,
        live_and_tree=live_tree,
        owners={s: held[s] for s in sorted(flagged)[:MAX_IDS]},
        missing_ids=() if missing is None else missing[:MAX_RETURN],
    )


def _ids(tensors: Iterable[Any]) -> list[int]:
    return _flat_ids([t for t in tensors if t is not None])[0]


def _flat_ids(tensors: list[Any]) -> tuple[list[int], list[int]]:
    """Every id of ``tensors`` in one host transfer, and how many each tensor has.  One
    ``torch.cat`` call when they are all 1-d (the usual case: a per-tensor reshape and cast cost
    more than the census arithmetic), else each is flattened first."""
    import torch

    if not tensors:
        return [], []
    try:
        joined = torch.cat(tensors)
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
    """Whether the prefix tree owns nothing (its counters say so; no tensor is read)."""
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
    Mamba values).  SGLang's helpers cannot concatenate an empty tree, hence the check."""
    if tree_is_empty(tree_cache):
        return []
    flatten = getattr(tree_cache, flatten_name, None)
    if callable(flatten):
        return [flatten()]
    root = tree_cache.root_node
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
    """``(request id, Mamba slot ids)`` of every live request, read with one host transfer."""
    fast = None
    if shape.held_rule is not HeldRule.REQ_KV:
        try:
            fast = _single_slot_owners(live, shape)
        except Exception:  # an odd request: the per-request path reads (and names) it
            fast = None
    return fast if fast is not None else _live_mamba_each(live, shape)


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


def mamba_census(
    sched: Any, shape: Shape, reading: Reading, live: LiveSet, *, idle: bool
) -> PoolCensus | None:
    """The Mamba census, or ``None`` when this rank has no Mamba pool or it cannot be read."""
    free = mamba_free_list(sched, shape, reading)
    size = reading.int_of(reading.attr(sched, "req_to_token_pool.mamba_pool.size"), "mamba.size")
    if free is MISSING or size is None:
        return None
    tree_cache = reading.attr(sched, "tree_cache")
    tree = reading.guard(
        "census.mamba.tree",
        lambda: _ids(tree_values(tree_cache, "all_mamba_values_flatten", "mamba_value")),
        None,
    )
    queue = reading.guard("census.mamba.live", lambda: _live_mamba(live, shape), None)
    free_ids = reading.guard("census.mamba.free", lambda: _ids([free]), None)
    if tree is None or queue is None or free_ids is None:
        return None
    first = shape.mamba_first_id
    return id_census(Pool.MAMBA, size, first, free_ids, tree, (), check_missing=idle, owners=queue)

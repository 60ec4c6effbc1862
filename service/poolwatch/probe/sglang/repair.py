"""Guard mode (opt-in, ``POOLWATCH_PROBE_GUARD=1``): repair a free list on exact proof.

Reads: the census of one pool (:class:`~poolwatch.probe.census.proofs.PoolCensus`, taken at this loop
boundary) and the free list it was taken from.  Writes: that free list only, in the scheduler
thread, at a hook boundary (never inside an allocation group).  Cost: one tensor filter or one call
of the pool's own ``free`` per action; nothing when the census found nothing.

==============  ===========================================  =================================
action          proof                                        what changes
==============  ===========================================  =================================
quarantine      a free-listed slot a live request or a tree  every entry of the slot leaves the
                node owns (``free_and_live``/``free_and_     free list: no second request can
                tree``)                                      receive it
deduplicate     a slot twice on the free list                the later entries leave the list
return          at full idle, a slot in no set (``missing``) the pool's own ``free`` takes it
                *and* the count gap equals the missing count back (SGLang's zeroing included)
==============  ===========================================  =================================

"return" runs only on a release no newer than the newest one read
(:data:`~poolwatch.probe.sglang.shapes.NEWEST_RELEASE`): on a newer one SGLang may hold slots where
neither the census nor the counters look, and a "missing" slot could be one it still holds; there
quarantine and deduplicate (which only take entries off a free list) still run, the probe's health
says so (``guard_return: false``) and the reason is logged once.

Only layouts read from the released wheels are touched (``docs/engines/sglang.md`` has the table): the
Mamba free list (an int64 tensor ``free_slots`` on ``req_to_token_pool.mamba_pool``, or on
``mamba_allocator`` from 0.5.23; taken from the front, freed onto the end) in every known family,
0.5.23's int8 checkpoint pool's (``mamba_ckpt_pool.allocator.free_slots``, the same allocator class),
the full-KV ``free_pages``/``release_pages`` pair of ``TokenToKVPoolAllocator`` and
``PagedTokenToKVPoolAllocator``, and -- duplicates only -- the sliding-window side of
``SWATokenToKVPoolAllocator``.  Hierarchical or interleaved allocators and request rows are never
touched.  What a repair cannot undo: the work a wrong free already did (0.5.4's
``MambaPool.free`` zeroes the slot's recurrent state, so that one request continues from a zeroed
state), and a slot two requests already shared.

Kept whole: what guard does to a free list and which free lists of which family it may touch are
read together, or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Phase, Pool, PoolAccount
from poolwatch.probe.census.proofs import PoolCensus
from poolwatch.probe.core.repairs import RepairLog
from poolwatch.probe.sglang.shapes import NEWEST_RELEASE, Shape, known_release

__all__ = ["FULL_ALLOCATORS", "Repairer", "Settled", "census_of", "repairer_for"]

log = logging.getLogger("poolwatch.probe")
FULL_ALLOCATORS = frozenset({"TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator"})
Settled = tuple[tuple[TripwireKind, ...], Pool, tuple[int, ...]]  # what TripwireLog.settle takes
_QUARANTINED = (TripwireKind.FREE_AND_LIVE, TripwireKind.FREE_AND_TREE, TripwireKind.FREE_DUPLICATE)
_DEDUPED = (TripwireKind.FREE_DUPLICATE, TripwireKind.OVER_SIZE)


def _mamba_owner(sched: Any, shape: Shape) -> Any:
    pool = sched.req_to_token_pool
    owner = pool.mamba_allocator if shape.mamba_allocator else pool.mamba_pool
    if getattr(owner, "_alloc_iter", None) is not None:  # 0.5.23 mid-group: not a boundary
        return None
    return owner if _is_ids(getattr(owner, "free_slots", None)) else None


def _checkpoint_owner(sched: Any) -> Any:
    """0.5.23's int8 checkpoint pool's slot allocator (a ``MambaSlotAllocator``), outside a group."""
    ckpt = getattr(getattr(sched, "req_to_token_pool", None), "mamba_ckpt_pool", None)
    owner = getattr(ckpt, "allocator", None)
    if owner is None or getattr(owner, "_alloc_iter", None) is not None:
        return None
    return owner if _is_ids(getattr(owner, "free_slots", None)) else None


def _full_owner(sched: Any, *, swa: bool) -> Any:
    alloc = getattr(sched, "token_to_kv_pool_allocator", None)
    if swa:  # the sliding-window side of SGLang's SWA pair (deduplicate only: no ownership census)
        pair = type(alloc).__name__ == "SWATokenToKVPoolAllocator"
        alloc = getattr(alloc, "swa_attn_allocator", None) if pair else None
    if type(alloc).__name__ not in FULL_ALLOCATORS or not getattr(alloc, "is_not_in_free_group", True):
        return None
    ok = _is_ids(getattr(alloc, "free_pages", None)) and _is_ids(getattr(alloc, "release_pages", None))
    return alloc if ok else None


def _is_ids(value: Any) -> bool:
    return hasattr(value, "numel") and str(getattr(value, "dtype", "")) == "torch.int64"


def _keep_first(ids: Any, slots: Sequence[int]) -> Any:
    """A mask of ``ids`` that drops every entry of ``slots`` after its first."""
    import torch

    keep = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
    for slot in slots:
        keep[torch.nonzero(ids == slot).reshape(-1)[1:]] = False
    return keep


def census_of(found: Sequence[Tripwire]) -> list[PoolCensus]:
    """The chunk check's findings as censuses the guard can act on (free-listed live slots only)."""
    out = []
    for t in found:
        if t.kind is TripwireKind.FREE_AND_LIVE:
            owners = dict.fromkeys(t.slots, t.requests)
            out.append(PoolCensus(t.pool, 0, 0, 0, 0, 0, (), t.slots, (), (), None, owners=owners))
    return out


class _FreeList:
    """The free list(s) of one pool, edited in place (Mamba: one tensor; full: free + release)."""

    def __init__(self, owner: Any, names: tuple[str, ...]) -> None:
        self.owner, self.names = owner, names

    def _edit(self, mask_of: Any) -> int:
        import torch

        parts = [getattr(self.owner, n) for n in self.names]
        joined = torch.cat(parts) if len(parts) > 1 else parts[0]
        keep = mask_of(joined)
        removed = int((~keep).sum())
        if removed:
            at = 0
            for name, part in zip(self.names, parts, strict=True):
                n = int(part.numel())
                setattr(self.owner, name, part[keep[at : at + n]])
                at += n
        return removed

    def page_size(self, pool: Pool) -> int:
        """Slots per id on this free list: the allocator's page size (full KV, SWA), else 1."""
        if pool in (Pool.MAMBA, Pool.MAMBA_CKPT):
            return 1
        page = getattr(self.owner, "page_size", 1)
        return page if isinstance(page, int) and page > 1 else 1

    def quarantine(self, slots: Sequence[int]) -> int:
        import torch

        wanted = torch.tensor(list(slots), dtype=torch.int64)
        return self._edit(lambda ids: ~torch.isin(ids, wanted.to(ids.device)))

    def deduplicate(self, slots: Sequence[int]) -> int:
        return self._edit(lambda ids: _keep_first(ids, slots))


class Repairer:
    """The guard of one probe: acts on censuses, keeps one :class:`Repair` per pool and kind."""

    def __init__(self, shape: Shape, repairs: RepairLog | None = None, *, allow_return: bool = True) -> None:
        self.shape = shape
        self.allow_return = allow_return  # off on releases newer than the newest read
        self.log = repairs if repairs is not None else RepairLog()

    def repairs(self) -> tuple[Repair, ...]:
        return self.log.all()

    def act(self, sched: Any, census: PoolCensus, hook: str, seq: int, *, gap: int | None) -> list[Settled]:
        """Repair what ``census`` proves; ``gap`` is the pool's exact count gap from the same
        boundary (``None`` when unknown: then nothing is returned).  Returns the settled findings."""
        free = self._free_list(sched, census.pool)
        if free is None:
            return []
        settled: list[Settled] = []
        page = free.page_size(census.pool)
        quarantine = tuple(sorted(set(census.free_and_live) | set(census.free_and_tree)))
        if quarantine and free.quarantine(quarantine):
            self._record(RepairKind.QUARANTINE, census, quarantine, hook, seq, page)
            settled.append((_QUARANTINED, census.pool, quarantine))
        dups = tuple(s for s in census.duplicates if s not in quarantine)
        if dups and free.deduplicate(dups):
            self._record(RepairKind.DEDUPLICATE, census, dups, hook, seq, page)
            settled.append((_DEDUPED, census.pool, dups))
        lost, missing = census.missing_ids, census.missing_count
        if (
            self.allow_return
            and lost
            and gap is not None
            and missing is not None
            and missing * page == gap == len(lost) * page
        ):
            self._give_back(sched, free, census.pool, lost)
            self._record(RepairKind.RETURN, census, lost, hook, seq, page)
            settled.append(((TripwireKind.MISSING,), census.pool, lost))
        return settled

    def act_all(
        self,
        sched: Any,
        found: Sequence[PoolCensus],
        pools: Mapping[Pool, PoolAccount],
        phase: Phase,
        hook: str,
        seq: int,
    ) -> list[Settled]:
        """:meth:`act` on every census; a pool's exact gap is passed only at full idle."""
        settled: list[Settled] = []
        for census in found:
            account = pools.get(census.pool)
            exact = gap(account) if account is not None and phase is Phase.IDLE else None
            settled += self.act(sched, census, hook, seq, gap=exact)
        return settled

    def _free_list(self, sched: Any, pool: Pool) -> _FreeList | None:
        if pool in (Pool.MAMBA, Pool.MAMBA_CKPT):
            owner = _mamba_owner(sched, self.shape) if pool is Pool.MAMBA else _checkpoint_owner(sched)
            return None if owner is None else _FreeList(owner, ("free_slots",))
        if pool in (Pool.FULL, Pool.SWA):
            owner = _full_owner(sched, swa=pool is Pool.SWA)
            return None if owner is None else _FreeList(owner, ("free_pages", "release_pages"))
        return None

    @staticmethod
    def _give_back(sched: Any, free: _FreeList, pool: Pool, slots: Sequence[int]) -> None:
        """The pool's own ``free``: it zeroes what SGLang zeroes and picks the list SGLang picks."""
        import torch

        ids = torch.tensor(list(slots), dtype=torch.int64)
        if pool is Pool.FULL:
            page = int(getattr(free.owner, "page_size", 1) or 1)
            ids = ids * page
        first = getattr(free.owner, free.names[0])
        free.owner.free(ids.to(first.device))

    def _record(
        self, kind: RepairKind, census: PoolCensus, slots: tuple[int, ...], hook: str, seq: int, page: int = 1
    ) -> None:
        self.record(kind, census.pool, slots, census.requests_of(slots), hook, seq, page=page)

    def record(
        self,
        kind: RepairKind,
        pool: Pool,
        slots: tuple[int, ...],
        requests: tuple[str, ...],
        hook: str,
        seq: int,
        *,
        page: int = 1,
    ) -> None:
        """Count and log one action in the probe's :class:`~poolwatch.probe.core.repairs.RepairLog`."""
        self.log.record(kind, pool, slots, requests, hook, seq, page=page)


def repairer_for(shape: Shape, version: str, repairs: RepairLog | None = None) -> Repairer:
    """Guard's repairer for SGLang ``version``: "return" off (and said once) on a release newer
    than the newest whose wheels were read."""
    known = known_release(version)
    if not known:
        log.warning(
            "poolwatch guard: SGLang %r is newer than the newest release the probe knows (%s): "
            "'return' and refusals stay off; quarantine and deduplicate run",
            version[:40],
            ".".join(str(n) for n in NEWEST_RELEASE[:3]),
        )
    return Repairer(shape, repairs, allow_return=known)

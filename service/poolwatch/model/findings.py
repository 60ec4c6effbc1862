"""What the probe proves and does about a pool's slot ids: tripwires, guard's repairs, and the
engine's call site of each (no figures: those are :mod:`poolwatch.model.rank`'s)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from poolwatch.model.rank import Pool

__all__ = [
    "CallSite",
    "CallSiteKind",
    "Frame",
    "LEAK_KINDS",
    "Repair",
    "RepairKind",
    "Tripwire",
    "TripwireKind",
]


class TripwireKind(enum.StrEnum):
    """Identity faults the probe's census can prove, naming slot ids."""

    FREE_DUPLICATE = "free_duplicate"  # a slot id is twice in the free list(s)
    FREE_AND_LIVE = "free_and_live"  # a free slot is also held by a live request
    FREE_AND_TREE = "free_and_tree"  # a free slot is also a prefix-tree node's value
    OVER_SIZE = "over_size"  # more free slots than the pool has
    OUT_OF_RANGE = "out_of_range"  # a free id outside the pool's id range
    MISSING = "missing"  # an id in no list at all (lost)
    LIVE_SHARED = "live_shared"  # two live requests hold the same slot (both are corrupt)
    LIVE_AND_TREE = "live_and_tree"  # a live request privately holds a slot a tree node owns
    # allocated to a live request past what its release frees (kv_allocated_len, the row's end):
    # no set holds it, and the request's release will not free it (a leak named before it happens)
    UNRELEASED = "unreleased"
    # ref-counted block pools (vLLM V1): the per-block reference census
    NEGATIVE_REF = "negative_ref"  # a block's ref_cnt is below zero (freed more often than taken)
    REF_BELOW_OWNERS = "ref_below_owners"  # fewer references than requests listing it (a double free)
    REF_ABOVE_OWNERS = "ref_above_owners"  # more references than owners, nothing may pin it (a leak)
    NULL_BLOCK = "null_block"  # the null block on the free queue, or another block marked null
    # wrong only in time: the books balance, the free came before the last user was done
    FREED_IN_FLIGHT = "freed_in_flight"  # freed while an in-flight step lists it, an unordered writer present


LEAK_KINDS = frozenset(
    {TripwireKind.MISSING, TripwireKind.REF_ABOVE_OWNERS, TripwireKind.UNRELEASED}
)  # slots lost (or lost at the owner's release), not freed twice
TIMING_KINDS = frozenset({TripwireKind.FREED_IN_FLIGHT})  # neither freed twice nor lost: freed too early


class RepairKind(enum.StrEnum):
    """What the probe's opt-in guard did to a free list (``POOLWATCH_PROBE_GUARD=1``)."""

    QUARANTINE = "quarantine"  # took a slot a live request or the tree owns off the free list
    DEDUPLICATE = "deduplicate"  # removed a second entry of one slot from the free list
    RETURN = "return"  # at idle, gave back a slot proven to be in no set (a leak)
    REFUSE = "refuse"  # refused a free of a slot still owned (or already free), before it ran (guard v2)


class CallSiteKind(enum.StrEnum):
    """Where the probe stood when it captured an engine call site (:class:`CallSite`)."""

    FREE = "free"  # inside the engine's call of a free the probe wraps: the innermost frame made it
    NEXT_FREE = "next_free"  # the free had returned before the probe looked: the next identical one
    HOOK = "hook"  # at a scheduler hook, after the fact: where the engine called that hook, not the free


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of the engine's code: no locals, no argument values."""

    file: str  # relative to the directory holding the engine's package ("sglang/srt/...")
    line: int
    function: str  # its qualified name ("HybridReqToTokenPool.free")


@dataclass(frozen=True, slots=True)
class CallSite:
    """The engine's frames above a finding or a guard action, innermost first (at most a few; the
    probe's own frames and every other package's are left out), captured once per finding."""

    kind: CallSiteKind
    frames: tuple[Frame, ...]
    seq: int = 0  # the scheduler iteration it was captured at (``next_free``: later than the finding)


@dataclass(frozen=True, slots=True)
class Tripwire:
    """A proven identity fault: these slot ids are where they must not be.  With ``page_size > 1``
    the ids are *page* ids of a paged free list, each standing for ``page_size`` slots (the unit
    of the pool's gap), as on :class:`Repair`."""

    kind: TripwireKind
    pool: Pool
    slots: tuple[int, ...]
    first_seen_hook: str  # the scheduler method after which it was first seen
    seq: int  # scheduler iteration of the first sighting
    requests: tuple[str, ...] = ()  # the live requests involved (``live_shared``: both), when known
    page_size: int = 1
    total: int = 0  # how many ids the finding covers, exactly, when more than ``slots`` names (0: len(slots))
    call_site: CallSite | None = None  # the engine's frames where it was found (None: not captured)

    @property
    def count(self) -> int:
        """The exact number of ids found (``slots`` names at most :data:`MAX_NAMED` of them)."""
        return max(self.total, len(self.slots))


@dataclass(frozen=True, slots=True)
class Repair:
    """What the guard did to one pool, of one kind, since the probe started: ``count`` slots in
    all (the unit of the pool's gap); the last action's ids, hook, iteration and affected requests.
    With ``page_size > 1`` the ids are *page* ids of a paged free list, each standing for
    ``page_size`` slots (so one page id and a count of 16 slots agree)."""

    kind: RepairKind
    pool: Pool
    count: int
    slots: tuple[int, ...]
    hook: str
    seq: int
    requests: tuple[str, ...] = ()
    page_size: int = 1
    call_site: CallSite | None = None  # the engine's frames of the last action's ``hook`` (first seen there)

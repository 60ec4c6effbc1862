"""The reference-count census of a block pool (vLLM V1): what one walk proves (pure; nothing is read here).

A ref-counted pool of ``n`` blocks (ids ``0..n-1``, one of them the null block, taken at start
and never counted) must satisfy, block by block::

    b on the free queue          <=>  ref_cnt(b) == 0        (and b is never the null block)
    each b on the free queue          at most once
    ref_cnt(b)                   >=   0
    ref_cnt(b)                   ==   owners(b)   (its occurrences in the requests' block lists and
                                                   the deferred frees; more than that is a pin)

Given the free-queue walk ``free`` (ids in queue order), each block's ``ref_cnt`` and each block's
owner count, :func:`refcount_census` names every block that breaks one of these lines (and asks
for the owners' names of those blocks only).  A block whose
count exceeds its owners is *pinned* when something outside the lists may legitimately hold it
(``pins_possible``: a KV connector or offloader), else a leak: with no owner at all it is
``orphaned`` (:attr:`~poolwatch.model.findings.TripwireKind.MISSING`), with fewer owners than its count
``ref_above_owners``.  A block with ``ref_cnt == 0`` that is not on the queue is lost as well.
Each finding names at most :data:`~poolwatch.probe.census.proofs.MAX_IDS` ids (a leak, ``missing``:
:data:`~poolwatch.probe.census.proofs.MAX_LEAK_IDS`); counts are complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import not_

from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS, MAX_LEAK_IDS

__all__ = ["RefCensus", "refcount_census"]


@dataclass(frozen=True, slots=True)
class RefCensus:
    """The per-block census of one ref-counted pool."""

    pool: Pool
    blocks: int  # n, the null block included
    null_id: int
    free_walked: int  # distinct blocks reached on the free queue (from either end)
    free_counter: int  # the queue's own counter
    duplicates: tuple[int, ...]
    null_misuse: tuple[int, ...]  # the null block on the queue, or counted, or another block marked null
    free_and_held: tuple[int, ...]  # on the queue with ref_cnt > 0 or an owner
    negative: tuple[int, ...]
    below_owners: tuple[int, ...]  # ref_cnt < owners (a double free the count may hide)
    above_owners: tuple[int, ...]  # ref_cnt > owners > 0, nothing may pin: a lost reference
    orphaned: tuple[int, ...]  # ref_cnt > 0, no owner, nothing may pin; or ref_cnt 0 and not free
    pinned: int  # blocks held beyond their owners where a connector may pin them
    counts: Mapping[str, int]  # every finding's complete count (ids are capped)
    owners: Mapping[int, tuple[str, ...]]  # the owners of each named block (capped)

    def findings(self) -> dict[str, tuple[int, ...]]:
        return {
            "free_duplicate": self.duplicates,
            "null_block": self.null_misuse,
            "free_and_live": self.free_and_held,
            "negative_ref": self.negative,
            "ref_below_owners": self.below_owners,
            "ref_above_owners": self.above_owners,
            "missing": self.orphaned,
        }

    def clean(self) -> bool:
        return not any(self.counts.values())

    def tripwires(self, hook: str, seq: int) -> list[Tripwire]:
        """One tripwire per finding (a finding is named as its :class:`TripwireKind`)."""
        out: list[Tripwire] = []
        for name, ids in self.findings().items():
            if ids:
                reqs = sorted({o for i in ids for o in self.owners.get(i, ())})[:MAX_IDS]
                total = self.counts.get(name, 0)
                out.append(Tripwire(TripwireKind(name), self.pool, ids, hook, seq, tuple(reqs), total=total))
        return out


class _Found:
    """Complete counts, ids capped at MAX_IDS."""

    def __init__(self) -> None:
        self.ids: dict[str, list[int]] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, block: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        ids = self.ids.setdefault(name, [])
        if len(ids) < (MAX_LEAK_IDS if name == "missing" else MAX_IDS):
            ids.append(block)

    def get(self, name: str) -> tuple[int, ...]:
        return tuple(self.ids.get(name, ()))


def _walk_findings(walks: Sequence[Sequence[int]], n: int, null_id: int, found: _Found) -> set[int]:
    """Ids seen twice in one walk are duplicates; the union of the walks is what is queued."""
    queued: set[int] = set()
    reported: set[int] = set()
    for walk in walks:
        seen: set[int] = set()
        for block in walk:
            if block in seen and block not in reported:
                reported.add(block)
                found.add("free_duplicate", block)
            seen.add(block)
        queued |= seen
    for block in sorted(queued):
        if block == null_id:
            found.add("null_block", block)
        elif not 0 <= block < n and block not in reported:
            found.add("free_duplicate", block)  # not a block of this pool at all
    return queued


def _suspects(ref_cnt: Sequence[int], owned: Mapping[int, int], queued: set[int], null_id: int) -> list[int]:
    """The blocks that may break a line, found with C-level passes (a sound pool yields none):
    ``ref_cnt`` differing from the owner count, queued blocks with a count or an owner, and blocks
    with neither count, owner nor place on the queue."""
    n = len(ref_cnt)
    expected = [0] * n
    for block, count in owned.items():
        if 0 <= block < n:
            expected[block] = count
    out: set[int] = set()
    if list(ref_cnt) != expected:
        out.update(i for i, (r, e) in enumerate(zip(ref_cnt, expected, strict=True)) if r != e)
    zeros = set(compress(range(n), map(not_, ref_cnt)))
    out |= queued - zeros
    out |= queued.intersection(owned)
    out |= zeros - queued - owned.keys()
    out.discard(null_id)
    return sorted(i for i in out if 0 <= i < n)


@dataclass(frozen=True, slots=True)
class _Block:
    """What the lines of one block are checked on."""

    ref: int  # its ref_cnt
    listed: int  # its owners (its ref_cnt itself where the owner lists are not exact)
    queued: bool  # on the free queue


PINNED = "pinned"  # held beyond its owners where something may pin it: counted, never a finding
_BEYOND_OWNERS = "beyond_owners"  # a count above the owners off the queue: pinned, a lost reference or a leak
# The per-block decision: each line a block may break, and what breaking it is called; a block may
# break several, and the last three are exclusive (fewer references than owners, more, or none and
# no owner off the queue).
_LINES: tuple[tuple[str, Callable[[_Block], bool]], ...] = (
    ("negative_ref", lambda b: b.ref < 0),
    ("free_and_live", lambda b: b.queued and (b.ref > 0 or b.listed > 0)),
    ("ref_below_owners", lambda b: b.ref < b.listed),
    (_BEYOND_OWNERS, lambda b: b.ref > b.listed and not b.queued),
    ("missing", lambda b: b.ref == 0 == b.listed and not b.queued),
)


def _block_findings(block: _Block, pins_possible: bool) -> list[str]:
    """The findings of one block, in the order of :data:`_LINES` (:data:`PINNED` for a count above
    its owners that something may pin)."""
    out = []
    for name, broken in _LINES:
        if broken(block):
            out.append(_beyond_owners(block, pins_possible) if name == _BEYOND_OWNERS else name)
    return out


def _beyond_owners(block: _Block, pins_possible: bool) -> str:
    if pins_possible:
        return PINNED
    return "ref_above_owners" if block.listed else "missing"  # a lost reference; with no owner, a leak


def refcount_census(
    pool: Pool,
    *,
    free: Sequence[int],
    free_back: Sequence[int] = (),
    free_counter: int,
    ref_cnt: Sequence[int],
    owned: Mapping[int, int],
    names: Callable[[set[int]], Mapping[int, Sequence[str]]] | None = None,
    null_id: int = 0,
    null_marked: Sequence[int] = (0,),
    pins_possible: bool = False,
    reserved: frozenset[int] = frozenset(),
    owners_exact: bool = True,
) -> RefCensus:
    """The census of one pool: ``ref_cnt[i]`` of block ``i``, ``owned[i]`` how many owners list it.

    ``free``/``free_back``: the queue walked from its head and from its tail (a block queued twice
    shows in the second); ``names(ids)``: the owners of the named blocks, asked only when there are
    some (request ids; stale requests too, which are never owners); ``null_marked``: the ids whose
    ``is_null`` flag is set (exactly the null block when sound); ``reserved``: blocks the engine took
    off the queue for good at ``ref_cnt`` 0 (never findings while they stay so); ``owners_exact``
    False: some lists name blocks they hold no reference to (HiSparse), so only the queue's own
    lines are checked.  O(n) in C-level passes, and Python work per suspect block only."""
    n = len(ref_cnt)
    found = _Found()
    on_queue = _walk_findings((free, free_back), n, null_id, found)
    for block in null_marked:
        if block != null_id:
            found.add("null_block", block)
    pinned = 0
    for block in _suspects(ref_cnt, owned, on_queue, null_id):
        ref, queued = ref_cnt[block], block in on_queue
        if block in reserved and ref == 0 and not queued and not owned.get(block, 0):
            continue  # taken off the queue for good by the engine
        listed = owned.get(block, 0) if owners_exact else ref
        for name in _block_findings(_Block(ref, listed, queued), pins_possible):
            if name == PINNED:
                pinned += 1
            else:
                found.add(name, block)
    named = {i for ids in found.ids.values() for i in ids}
    labels = names(named) if names is not None and named else {}
    return RefCensus(
        pool=pool,
        blocks=n,
        null_id=null_id,
        free_walked=len(on_queue),
        free_counter=free_counter,
        duplicates=found.get("free_duplicate"),
        null_misuse=found.get("null_block"),
        free_and_held=found.get("free_and_live"),
        negative=found.get("negative_ref"),
        below_owners=found.get("ref_below_owners"),
        above_owners=found.get("ref_above_owners"),
        orphaned=found.get("missing"),
        pinned=pinned,
        counts=dict(found.counts),
        owners={i: tuple(who)[:8] for i, who in sorted(labels.items()) if who},
    )

"""Who holds each block, kept up to date incrementally: the cheap sample's cost does not grow with
the blocks held (EngineCore thread).

An owner of a block is an occurrence in a request's list (one ``req_to_blocks`` per KV cache group).
A full-attention list only grows until vLLM pops it (finish, preemption, abort; the wrapped
``pop_blocks_for_free``/``free`` tell the index at once), so each sample reads only what was
appended since the last one -- O(requests + new blocks), not O(blocks held).  The index keeps the
list objects it counted and re-counts a list that was replaced, shortened or changed at its last
counted entry (a copy-on-write swap).  Lists of the other managers (sliding window, Mamba, chunked
local, sink, HiSparse...) may be edited in place, so they are counted afresh at every sample: they
hold the few blocks of a window or a state.  The full walk (:mod:`~poolwatch.probe.vllm.census`)
rebuilds the index from scratch and counts any drift in the probe's health.

The occurrence counts serve the free-time check too (:mod:`~poolwatch.probe.vllm.free_check`): a
block that a free would leave with fewer references than the lists that still name it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from poolwatch.probe.core.access import MISSING, Reading

__all__ = ["APPEND_ONLY", "HolderIndex", "Held", "Tracked"]

_ID = attrgetter("block_id")
# managers whose lists only grow until popped (read incrementally); every other is read afresh
APPEND_ONLY = frozenset({"FullAttentionManager", "CrossAttentionManager"})
LIVE, TRANSFER, STALE = "live", "transfer", "stale"
MAX_EXPECTED = 1 << 16  # popped blocks awaiting their free, at most


@dataclass(slots=True)
class Tracked:
    """One request's list in one manager, as counted."""

    blocks: list[Any]  # vLLM's own list object
    kind: str  # live, transfer (finished, kept for a KV transfer) or stale (request unknown)
    ids: list[int] = field(default_factory=list)  # the ids counted from it (null block left out)
    counted: int = 0  # entries counted
    last: Any = None  # the entry at ``counted - 1`` when counted (a swap there re-counts the list)


@dataclass(frozen=True, slots=True)
class Held:
    """The distinct blocks of each kind of holder at one sample."""

    held: int  # by live requests, deferred frees, pins and reserved blocks
    session: int  # only by finished requests whose blocks a KV connector keeps
    stale: int  # only by lists of requests the scheduler no longer knows (a leak)
    stale_requests: tuple[str, ...]


class HolderIndex:
    """Occurrence counts of every block in the append-only lists, by kind of holder."""

    def __init__(self) -> None:
        self.tracked: dict[tuple[int, str], Tracked] = {}
        self.counts: dict[str, dict[int, int]] = {LIVE: {}, TRANSFER: {}, STALE: {}}
        self.null_id: int | None = None
        self.expected: dict[int, int] = {}  # blocks of popped lists not yet seen at a free
        self.drift = 0  # full rebuilds that found the incremental counts wrong

    # -- the incremental read -----------------------------------------------------------------

    def sync(self, lists: list[tuple[int, Any]], kinds: Callable[[str], str]) -> None:
        """Bring the counts up to date: ``lists`` the append-only managers' ``req_to_blocks`` by
        manager index, ``kinds(rid)`` a request's kind (stale: the scheduler does not know it)."""
        seen: set[tuple[int, str]] = set()
        for index, req_to_blocks in lists:
            for rid, blocks in list(req_to_blocks.items()):
                key = (index, rid)
                seen.add(key)
                self._read(key, blocks, kinds(rid))
        for key in [k for k in self.tracked if k not in seen]:
            self.forget(key)

    def _read(self, key: tuple[int, str], blocks: Any, kind: str) -> None:
        t = self.tracked.get(key)
        n = len(blocks)
        changed = t is not None and (
            t.blocks is not blocks or n < t.counted or (t.counted > 0 and blocks[t.counted - 1] is not t.last)
        )
        if t is not None and changed:
            self.forget(key)
            t = None
        if t is None:
            t = self.tracked[key] = Tracked(blocks, kind)
        elif t.kind != kind:
            self._count(t.ids, t.kind, -1)
            t.kind = kind
            self._count(t.ids, kind, 1)
        if n > t.counted:
            new = list(map(_ID, blocks[t.counted : n]))
            if self.null_id in new:
                new = [i for i in new if i != self.null_id]
            t.ids += new
            self._count(new, kind, 1)
            t.counted, t.last = n, blocks[n - 1]

    def forget(self, key: tuple[int, str]) -> None:
        """The list of ``key`` is gone (popped by vLLM): its occurrences no longer own anything."""
        t = self.tracked.pop(key, None)
        if t is not None:
            self._count(t.ids, t.kind, -1)

    def released(self, index: int, rid: str, blocks: Any) -> None:
        """A manager is about to pop ``rid``'s list ``blocks`` to free it: its occurrences stop
        owning now, and its blocks are expected at a free (now, or later for a deferred free)."""
        self.forget((index, rid))
        ids = [i for i in map(_ID, blocks) if i != self.null_id]
        for i in ids:
            self.expected[i] = self.expected.get(i, 0) + 1
        while len(self.expected) > MAX_EXPECTED:  # popped blocks never freed (a leak): forget the oldest
            del self.expected[next(iter(self.expected))]

    def explained(self, ids: list[int]) -> bool:
        """Whether a free of ``ids`` is what earlier pops announced (each id consumed once); False
        when some block comes with no pop before it (then the lists are read again before judging)."""
        expected = self.expected
        whole = True
        for i in ids:
            n = expected.get(i, 0)
            if n > 1:
                expected[i] = n - 1
            elif n == 1:
                del expected[i]
            elif i != self.null_id:
                whole = False
        return whole

    def _count(self, ids: list[int], kind: str, sign: int) -> None:
        counts = self.counts[kind]
        get = counts.get
        for i in ids:
            now = get(i, 0) + sign
            if now:
                counts[i] = now
            else:
                del counts[i]

    # -- what it says ---------------------------------------------------------------------------

    def owners(self, block_id: int) -> int:
        """Occurrences of ``block_id`` in live and transfer lists (stale lists own nothing)."""
        return self.counts[LIVE].get(block_id, 0) + self.counts[TRANSFER].get(block_id, 0)

    def held(self, extra: set[int], extra_session: set[int]) -> Held:
        """The distinct blocks held, with ``extra`` (the lists read afresh, deferred frees, pins,
        reserved blocks) and ``extra_session`` (afresh-read lists of finished requests)."""
        live, transfer, stale = self.counts[LIVE], self.counts[TRANSFER], self.counts[STALE]
        outside = {i for i in extra if i not in live}
        held = len(live) + len(outside)
        session = sum(1 for i in transfer if i not in live and i not in outside)
        session += sum(1 for i in extra_session if i not in live and i not in outside and i not in transfer)
        stale_only = sum(1 for i in stale if i not in live and i not in transfer and i not in outside)
        requests = tuple(sorted({rid for (_, rid), t in self.tracked.items() if t.kind == STALE}))
        return Held(held, session, stale_only, requests)

    def snapshot(self) -> dict[str, dict[int, int]]:
        """A copy of the counts (the full rebuild compares them)."""
        return {kind: dict(c) for kind, c in self.counts.items()}


def append_only(mgr: Any) -> bool:
    return type(mgr).__name__ in APPEND_ONLY


def lists_of(pool: Any, mgrs: tuple[Any, ...], reading: Reading) -> Iterator[tuple[int, Any, bool]]:
    """``(manager index, req_to_blocks, append-only)`` of every manager bound to ``pool``."""
    for index, mgr in enumerate(mgrs):
        if reading.attr(mgr, "block_pool", optional=True) is not pool:
            continue
        lists = reading.attr(mgr, "req_to_blocks")
        if lists is not MISSING:
            yield index, lists, append_only(mgr)

"""Who holds each block, kept up to date incrementally: the cheap sample's cost does not grow with
the blocks held (EngineCore thread).

An owner of a block is an occurrence in a request's list (one ``req_to_blocks`` per KV cache group).
A full-attention list only grows until vLLM pops it (finish, preemption, abort; the wrapped
``pop_blocks_for_free``/``free`` tell the index at once), so each sample finds the lists that
changed with C-level passes over their identities and lengths and reads only what was appended to
them -- O(requests) in C plus O(new blocks), not O(blocks held).  A request that finished while a
KV connector keeps its list is told as such at the next census (the split between ``held`` and
``session_held`` may lag until then; their sum, and so the gap, never does).  The index keeps the
list objects it counted and re-counts a list that was replaced, shortened or changed at its last
counted entry (a copy-on-write swap).  Lists of the other managers (sliding window, Mamba, chunked
local, sink, HiSparse...) may be edited in place, so they are counted afresh at every sample: they
hold the few blocks of a window or a state.  The full walk (:mod:`~poolwatch.probe.vllm.census`)
rebuilds the index from scratch and counts any drift in the probe's health.

The occurrence counts serve the free-time check too (:mod:`~poolwatch.probe.vllm.free_check`): a
block that a free would leave with fewer references than the lists that still name it.

Kept whole: one incremental index whose invariant -- the counted lists, the pops awaiting their free
and the occurrence counts agree -- every method keeps; the walk that rebuilds it from scratch is
``census.py``.
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading

__all__ = ["APPEND_ONLY", "HolderIndex", "Held", "Tracked"]

_ID = attrgetter("block_id")
# managers whose lists only grow until popped (read incrementally); every other is read afresh
APPEND_ONLY = frozenset({"FullAttentionManager", "CrossAttentionManager"})
LIVE, TRANSFER, STALE = "live", "transfer", "stale"
MAX_EXPECTED = 1 << 16  # popped blocks awaiting their free, at most
MAX_ANNOUNCED = 64  # popped lists kept whole while their free has not come (then counted by block)
STALE_EVERY = 10  # a steady-state sync looks for a request that went (leaving its list) this often


@dataclass(slots=True)
class Tracked:
    """One request's list in one manager, as counted."""

    blocks: list[Any]  # vLLM's own list object
    kind: str  # live, transfer (finished, kept for a KV transfer) or stale (request unknown)
    ids: list[int] = field(default_factory=list)  # the ids counted from it (null block left out)
    counted: int = 0  # entries counted
    last: Any = None  # the entry at ``counted - 1`` when counted (a swap there re-counts the list)


@dataclass(slots=True)
class Shape:
    """One manager's lists as the last sync left them (less those forgotten since), in order."""

    lists: dict[int, Any]  # id -> vLLM's list object (held: an id cannot be reused while known)
    unlisted: int  # requests without a list, less lists without a request


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
        self._expected: dict[int, int] = {}  # blocks of popped lists not yet seen at a free
        # the popped lists' ids, newest last, not yet counted into ``_expected``: a free that is the
        # last pop's list (vLLM frees a list right after popping it) consumes it whole
        self._announced: deque[list[int]] = deque()
        self._waiting = 0  # the ids in ``_announced``
        self.drift = 0  # full rebuilds that found the incremental counts wrong
        self._seen: dict[int, dict[int, str]] = {}  # per manager: id(list) -> rid, every one tracked
        self._stale: dict[int, set[str]] = {}  # per manager: the rids whose request is gone
        # per manager: its lists at the last sync, in order (less those forgotten since), their ids,
        # and how many more requests than lists there were
        self._shape: dict[int, Shape] = {}
        self._syncs = 0
        self._lens: dict[int, int] = {}  # per manager: the entries of its lists at the last sync
        self._counted = 0  # entries read over every tracked list: the rest are pending
        self._kept: dict[str, set[tuple[int, str]]] = {TRANSFER: set(), STALE: set()}  # lists by kind
        self._empty: set[tuple[int, str]] = set()  # lists read while still empty (see :meth:`sync`)

    # -- the incremental read -----------------------------------------------------------------

    def sync(
        self,
        lists: list[tuple[int, Any]],
        requests: Mapping[str, Any],
        kind: Callable[[str], str],
        *,
        read: bool = False,
    ) -> None:
        """Bring the counts up to date: ``lists`` the append-only managers' ``req_to_blocks`` by
        manager index; ``requests`` the scheduler's known requests (a list of any other is stale);
        ``kind(rid)`` a known request's kind, asked for the lists new since the last sync.

        Which lists changed is found with C-level passes over their identities and lengths; new
        lists are read, and so are all the entries appended since (``read``), else those are
        *pending*: counted as fresh blocks, one each.  A block vLLM appends to a list it already
        counted is one ``get_new_blocks`` just took off the free queue (prefix hits go only into a
        request's first, empty list), so while the pool is sound a pending entry is a distinct block
        no other list names; the free-time check and the census read them first (``read=True``).
        A list first seen empty is read in full once it has entries: a release that sizes an
        allocation through ``req_to_blocks[rid]`` (a ``defaultdict``: 0.10.2, for one) makes a
        waiting request's list even when the allocation then fails, and its prefix hits land there
        later.
        A steady-state sync is then O(requests) in C and nothing per list."""
        for index, req_to_blocks in lists:
            self._sync_one(index, req_to_blocks, requests, kind)
        for key in [k for k in self._empty if len(self.tracked[k].blocks)]:
            self._read(key, self.tracked[key].blocks, self.tracked[key].kind)
        if read:
            self._read_pending(kind)
        for index in self._seen.keys() - {i for i, _ in lists}:  # a manager no longer bound
            for rid in self._seen.pop(index).values():
                self.forget((index, rid))
            self._stale.pop(index, None)

    def _sync_one(
        self, index: int, req_to_blocks: Any, requests: Mapping[str, Any], kind: Callable[[str], str]
    ) -> None:
        # the steady state is two C-level passes and no new object per list: ``len`` of each list
        # (its header), and the lists compared by identity with the last sync's (``is``)
        self._syncs += 1
        self._lens[index] = sum(map(len, req_to_blocks.values()))
        unlisted = len(requests) - len(req_to_blocks)  # requests without a list, less lists without one
        shape = self._appended(index, req_to_blocks, requests, kind)
        if shape is not None and (
            (self._syncs % STALE_EVERY and unlisted == shape.unlisted)
            or req_to_blocks.keys() - requests.keys() == self._stale[index]
        ):
            shape.unlisted = unlisted
            return
        ids = list(map(id, req_to_blocks.values()))
        # what changed: the lists that came, went or were replaced, found by identity (C-level
        # passes); entries appended to a list already counted stay pending, as in the steady state
        stale = set(req_to_blocks.keys() - requests.keys())
        now = dict(zip(ids, req_to_blocks.keys(), strict=True))
        before = self._seen.get(index, {})
        for list_id in before.keys() - now.keys():
            self._forget_seen(index, before[list_id], list_id)
        for list_id in now.keys() - before.keys():
            rid = now[list_id]
            self._read((index, rid), req_to_blocks[rid], STALE if rid in stale else kind(rid))
        for rid in stale ^ self._stale.get(index, set()):  # a request gone (or back) with its list
            if rid in req_to_blocks:
                self._rekind((index, rid), STALE if rid in stale else kind(rid))
        self._seen[index], self._stale[index] = now, stale
        self._shape[index] = Shape(dict(zip(ids, req_to_blocks.values(), strict=True)), unlisted)

    def _appended(
        self,
        index: int,
        req_to_blocks: Any,
        requests: Mapping[str, Any],
        kind: Callable[[str], str],
    ) -> Shape | None:
        """The common case, read in O(what changed): the lists counted at the last sync (less those
        popped since: :meth:`forget` takes them out) are still there, the same objects in the same
        order, and any new ones come after them (a dict keeps its insertion order: vLLM adds a
        request's list when it first schedules it).  The new lists are read and appended to the
        shape (returned); None when anything else changed (a list gone without a pop, or replaced):
        the caller compares every list."""
        last = self._shape.get(index)
        if last is None:
            return None
        known, n = last.lists, len(req_to_blocks)
        m = len(known)
        if n < m or not all(map(operator.is_, known.values(), req_to_blocks.values())):
            return None
        if n > m:
            seen, stale = self._seen[index], self._stale[index]
            tail = list(itertools.islice(reversed(req_to_blocks.items()), n - m))
            for rid, blocks in reversed(tail):
                seen[id(blocks)] = rid
                gone = rid not in requests
                if gone:
                    stale.add(rid)
                self._read((index, rid), blocks, STALE if gone else kind(rid))
                known[id(blocks)] = blocks
        return last

    def _forget_seen(self, index: int, rid: str, list_id: int) -> None:
        """A list counted at the last sync is no longer in its manager: forget it, unless its
        request already lists a newer one (read since, e.g. after a pop)."""
        t = self.tracked.get((index, rid))
        if t is not None and id(t.blocks) == list_id:
            self.forget((index, rid))

    def _read_pending(self, kind: Callable[[str], str]) -> None:
        """Read every list's pending entries (O(requests) in Python: the free-time check and the
        census only).  A list replaced or edited at its last counted entry is read afresh."""
        for key, t in list(self.tracked.items()):
            if len(t.blocks) != t.counted:
                self._read(key, t.blocks, t.kind)

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
            self._keep(key, kind)
        elif t.kind != kind:
            self._rekind(key, kind)
        if n == 0:
            self._empty.add(key)
        elif n > t.counted:
            self._empty.discard(key)
            new = list(map(_ID, blocks[t.counted : n]))
            if self.null_id in new:
                new = [i for i in new if i != self.null_id]
            t.ids += new
            self._count(new, kind, 1)
            self._counted += n - t.counted
            t.counted, t.last = n, blocks[n - 1]

    def _keep(self, key: tuple[int, str], kind: str, *, drop: str = "") -> None:
        if drop in self._kept:
            self._kept[drop].discard(key)
        if kind in self._kept:
            self._kept[kind].add(key)

    def _rekind(self, key: tuple[int, str], kind: str) -> None:
        t = self.tracked.get(key)
        if t is not None and t.kind != kind:
            self._count(t.ids, t.kind, -1)
            self._keep(key, kind, drop=t.kind)
            t.kind = kind
            self._count(t.ids, kind, 1)

    def kinds_at_census(self, kind: Callable[[str], str]) -> None:
        """Re-tell every known request's kind (a request that finished while a KV connector keeps
        its list does not grow it: the census, at its low rate, notices)."""
        for key, t in list(self.tracked.items()):
            if t.kind != STALE:
                self._rekind(key, kind(key[1]))

    def forget(self, key: tuple[int, str]) -> None:
        """The list of ``key`` is gone (popped by vLLM): its occurrences no longer own anything."""
        t = self.tracked.pop(key, None)
        self._empty.discard(key)
        if t is not None:
            self._count(t.ids, t.kind, -1)
            self._keep(key, "", drop=t.kind)
            self._counted -= t.counted
            self._unseen(key, id(t.blocks))

    def _unseen(self, key: tuple[int, str], list_id: int) -> None:
        """A forgotten list is no longer one the next sync expects (only tracked lists are seen:
        an id there is never a new list's at a freed one's address)."""
        index = key[0]
        seen = self._seen.get(index, {})
        if seen.get(list_id) != key[1]:
            return
        del seen[list_id]
        shape = self._shape.get(index)
        if shape is not None and shape.lists.pop(list_id, None) is None:
            del self._shape[index]  # not among the lists of the last sync: compare them all next time

    def released(self, index: int, rid: str, blocks: Any) -> None:
        """A manager is about to pop ``rid``'s list ``blocks`` to free it: its occurrences stop
        owning now, and its blocks are expected at a free (now, or later for a deferred free)."""
        if (index, rid) not in self.tracked:  # never counted: compare every list at the next sync
            self._shape.pop(index, None)
        self.forget((index, rid))  # a list under this request again is read afresh
        ids = list(map(_ID, blocks))
        if self.null_id in ids:
            ids = [i for i in ids if i != self.null_id]
        announced = self._announced
        announced.append(ids)
        self._waiting += len(ids)
        while len(announced) > MAX_ANNOUNCED or self._waiting > MAX_EXPECTED:  # frees deferred (or
            self._expect(announced.popleft())  # never made): the oldest counted by block, bounded

    @property
    def expected(self) -> dict[int, int]:
        """The blocks of popped lists not yet seen at a free, with their occurrences."""
        while self._announced:
            self._expect(self._announced.popleft())
        return self._expected

    def _expect(self, ids: list[int]) -> None:
        self._waiting -= len(ids)
        expected, get = self._expected, self._expected.get
        for i in ids:
            expected[i] = get(i, 0) + 1
        while len(expected) > MAX_EXPECTED:  # popped blocks never freed (a leak): forget the oldest
            del expected[next(iter(expected))]

    def explained(self, ids: list[int]) -> bool:
        """Whether a free of ``ids`` is what earlier pops announced (each id consumed once); False
        when some block comes with no pop before it (then the lists are read again before judging).
        The usual free is the last pop's whole list, reversed or in order (a manager frees what it
        just popped): one comparison, no count by block."""
        announced = self._announced
        if announced:
            last = announced[-1]
            if len(last) == len(ids) and (ids == last[::-1] or ids == last):
                announced.pop()
                self._waiting -= len(ids)
                return True
        expected = self.expected
        get = expected.get
        whole = True
        for i in ids:
            n = get(i, 0)
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

    def _pending(self, kind: str) -> int:
        return sum(len(self.tracked[k].blocks) - self.tracked[k].counted for k in self._kept[kind])

    def held(self, extra: set[int], extra_session: set[int]) -> Held:
        """The distinct blocks held, with ``extra`` (the lists read afresh, deferred frees, pins,
        reserved blocks) and ``extra_session`` (afresh-read lists of finished requests); pending
        entries count one block each (:meth:`sync`)."""
        live, transfer, stale = self.counts[LIVE], self.counts[TRANSFER], self.counts[STALE]
        pending_transfer, pending_stale = self._pending(TRANSFER), self._pending(STALE)
        pending_live = sum(self._lens.values()) - self._counted - pending_transfer - pending_stale
        outside = {i for i in extra if i not in live}
        held = len(live) + len(outside) + pending_live
        session = sum(1 for i in transfer if i not in live and i not in outside) + pending_transfer
        session += sum(1 for i in extra_session if i not in live and i not in outside and i not in transfer)
        stale_only = sum(1 for i in stale if i not in live and i not in transfer and i not in outside)
        stale_only += pending_stale
        requests = tuple(sorted({rid for rids in self._stale.values() for rid in rids}))
        return Held(held, session, stale_only, requests)

    def occurrences(self) -> dict[int, int]:
        """Every block's occurrences in the lists, whatever their kind (the full rebuild compares them)."""
        out: dict[int, int] = {}
        for counts in self.counts.values():
            for i, n in counts.items():
                out[i] = out.get(i, 0) + n
        return out

    def adopt(self, fresh: HolderIndex, kind: Callable[[str], str]) -> bool:
        """Take ``fresh``'s counts (a full rebuild's); True when they differ from these (drift)."""
        self._read_pending(kind)
        drifted = fresh.counts != self.counts and fresh.occurrences() != self.occurrences()
        self.tracked, self.counts = fresh.tracked, fresh.counts
        self._seen, self._stale, self._shape = fresh._seen, fresh._stale, fresh._shape
        self._lens, self._counted, self._kept = fresh._lens, fresh._counted, fresh._kept
        self._empty = fresh._empty
        self.drift += drifted
        return drifted


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

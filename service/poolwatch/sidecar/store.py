"""The sidecar's state: every rank as each of its sources sees it, and each target's health.

A rank (``WorkerId.key``) may be described by several sources at once -- the in-process probe
(exact), SGLang's ``/metrics`` and SGLang's log (coarse).  The store keeps the latest snapshot and a
bounded history per *(rank, source)*, so one never overwrites another, and answers with one view
per rank: the most exact source among those that are fresh (within ``fresh_within`` seconds of
the rank's newest snapshot); a probe that stops answering gives way to SGLang's own figures.
Incidents are counted per rank over all its sources and every boot (a counter never goes back);
when each kind was last reported and when the rank last restarted (a source reporting a new boot)
are timed on the store's clock (not the log's, which may be skewed), so the rules can tell an
incident the restart ended from a new one.
A rank that reports nothing for a while can be forgotten (:meth:`SnapshotStore.forget_silent`).
The histories share one budget (``history_budget`` snapshots in all): each keeps ``history``
snapshots while the rank-sources are few (a per-pod sidecar) and ``history_budget`` divided by
their number when they are many (a central sidecar watching 1,000 ranks keeps 16 each by
default, not 256,000 snapshots), so memory stays bounded whatever the fleet's size.

They share a byte budget too (``history_bytes``, 48 MiB by default), whatever the snapshots weigh
(:func:`poolwatch.codec.footprint.weight`: a schema-valid 3.7 MB body of slot ids is some 19 MB of
Python objects): each (rank, source) may hold its share of it (the budget divided by their
number, at least :data:`MIN_SHARE`), its latest snapshot included; past its share the oldest of
its history is shed first, and a latest snapshot that alone weighs more than the share is made
lighter before anyone sees it (:func:`~poolwatch.codec.footprint.compact`: fewer ids and requests
named, every count exact), so the detector, the exporter, the incidents and the API all read the
same one.  The snapshots held weigh at most ``history_bytes`` plus :data:`MIN_SHARE` per
(rank, source), at any rate and size of input.

Written by the scrape loop, read by the collectors and the API.  A lock keeps readers on other
threads (the ``/metrics`` route runs in a worker thread) consistent; every operation is O(1) or
O(ranks).

Kept whole: one lock and all the state it guards (the latest snapshots, the histories and their
shared budget, each rank's view).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from poolwatch.codec.footprint import compact, weight
from poolwatch.conservation import findings
from poolwatch.errors import Reason
from poolwatch.model.rank import IncidentKind, SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.target_state import TargetState

__all__ = [
    "HISTORY_BUDGET",
    "HISTORY_BYTES",
    "MIN_SHARE",
    "PREFERENCE",
    "RankState",
    "SnapshotStore",
    "best_view",
]

HISTORY_BUDGET = 16384  # snapshots kept in all the histories together (~3.5 KB each)
HISTORY_BYTES = 48 << 20  # what they may weigh together (codec.footprint.weight)
MIN_SHARE = 64 << 10  # each (rank, source) may hold this much whatever their number
PREFERENCE = ("probe", "file", "metrics", "log")  # by channel (SourceKind.channel): exact first


@functools.lru_cache(maxsize=256)
def _preference(source: str) -> int:
    try:
        return PREFERENCE.index(SourceKind(source).channel)
    except ValueError:  # not a kind (a snapshot file may name anything): last
        return len(PREFERENCE)


def best_view(snaps: Iterable[Snapshot], fresh_within: float) -> Snapshot:
    """The snapshot that speaks for a rank: the most exact of the fresh ones (the newest first
    among equals); exact figures are never hidden behind coarser ones of the same moment."""
    listed = list(snaps)
    newest = max(s.taken_at for s in listed)
    return max(
        listed, key=lambda s: (s.taken_at >= newest - fresh_within, -_preference(s.source), s.taken_at)
    )


@dataclass(slots=True)
class _SourceView:
    latest: Snapshot
    history: deque[Snapshot]
    held: int = 0  # the weight of ``history`` (its last item is ``latest``)

    def add(self, snap: Snapshot, share: int) -> None:
        """``snap`` as the latest; the oldest shed while the history weighs more than ``share``
        (or holds more than its length allows)."""
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.held -= weight(self.history[0])
        self.history.append(snap)
        self.latest = snap
        self.held += weight(snap)
        while self.held > share and len(self.history) > 1:
            self.held -= weight(self.history.popleft())


@dataclass(slots=True)
class RankState:
    """One rank: each source's latest snapshot and history, the incidents of all of them, and
    when any source last reported it (the store's clock)."""

    sources: dict[str, _SourceView] = field(default_factory=dict)
    incidents: Counter[IncidentKind] = field(default_factory=Counter)
    incident_at: dict[IncidentKind, float] = field(default_factory=dict)  # last reported, per kind
    restarted_at: float | None = None  # when its latest new boot was seen (None: no restart seen)
    seen_at: float = 0.0


def _amends(snap: Snapshot, held: Snapshot) -> bool:
    """Whether ``snap``, of the held snapshot's clock, still says something new: the rank's final
    snapshot (its last word, written with the clock of the sample it amends), or that sample
    published again with findings made since (vLLM's free-time tripwire, a guard refusal: mid-step,
    with no new sample).  A copy delivered twice, or the sample before the findings, does not."""
    if snap.seq != held.seq:
        return False
    return (
        (snap.final and not held.final)
        or _adds(snap.tripwires, held.tripwires)
        or _adds(snap.repairs, held.repairs)
    )


def _adds(new: tuple[object, ...], old: tuple[object, ...]) -> bool:
    return len(new) > len(old) and all(item in new for item in old)


class SnapshotStore:
    """Latest snapshot + bounded ring per (rank, source), one view per rank, and target health."""

    def __init__(
        self,
        history: int = 256,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        *,
        fresh_within: float = 10.0,
        clock: Callable[[], float] = time.time,
        history_budget: int = HISTORY_BUDGET,
        history_bytes: int = HISTORY_BYTES,
    ) -> None:
        if history < 1 or history_budget < 1 or history_bytes < 1:
            raise ValueError("history, history_budget and history_bytes must be at least 1")
        self._history = history
        self._budget = history_budget
        self._bytes = history_bytes
        self._views = 0  # (rank, source) views held: the budget's divisor
        self._fresh_within = fresh_within
        self._clock = clock
        self._ranks: dict[str, RankState] = {}
        self._targets: dict[str, TargetState] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Snapshot], None]] = [] if on_snapshot is None else [on_snapshot]

    def subscribe(self, listener: Callable[[Snapshot], None]) -> None:
        """Call ``listener`` with every new snapshot (the detector subscribes)."""
        self._listeners.append(listener)

    def put(self, snap: Snapshot) -> bool:
        """Keep ``snap`` as its source's latest for the rank unless it is older than what we have.

        Returns False (and keeps nothing) for a duplicate or out-of-order snapshot of the same
        source and boot; the rank still counts as reporting.  A new ``boot_id`` (scheduler
        restarted, sequence reset) starts that source's history afresh.
        """
        with self._lock:
            rank = self._ranks.setdefault(snap.worker.key, RankState())
            rank.seen_at = self._clock()
            view = rank.sources.get(snap.source)
            if view is None or view.latest.boot_id != snap.boot_id:
                if view is not None:
                    rank.restarted_at = rank.seen_at
                else:
                    self._views += 1
                view = _SourceView(snap, deque(maxlen=self.history_depth()))
                rank.sources[snap.source] = view
            elif (
                snap.seq <= view.latest.seq
                and snap.taken_at <= view.latest.taken_at
                and not _amends(snap, view.latest)
            ):
                return False
            elif view.history.maxlen != (depth := self.history_depth()):
                view.history = deque(view.history, maxlen=depth)  # the newest kept
                view.held = sum(map(weight, view.history))
            share = self.history_share()
            snap = compact(snap, share)  # a snapshot heavier than its share, lighter: before anyone reads it
            rank.incidents.update(i.kind for i in snap.incidents)
            rank.incident_at.update((i.kind, rank.seen_at) for i in snap.incidents)
            view.add(snap, share)
        findings(snap)  # assessed once, here; the listeners, exporter and API read the memo
        for listener in self._listeners:
            listener(snap)
        return True

    def history_share(self) -> int:
        """The bytes each (rank, source) may hold now: its share of ``history_bytes`` (at least
        :data:`MIN_SHARE`)."""
        return max(MIN_SHARE, self._bytes // max(1, self._views))

    def history_depth(self) -> int:
        """How many snapshots each (rank, source) keeps now: ``history``, or its share of the
        budget when the views are many (at least 1: the latest)."""
        return max(1, min(self._history, self._budget // max(1, self._views)))

    def latest(self) -> list[Snapshot]:
        """The view of every rank (:func:`best_view` of its sources), ordered by rank key."""
        with self._lock:
            return [self._view(self._ranks[k]) for k in sorted(self._ranks)]

    def tp_peers(self, labels: Mapping[str, str]) -> int:
        """How many ranks the store holds that share the ``worker``, ``dp_rank`` and ``pp_rank`` of
        an alert's ``labels`` (its TP peers, itself included; at least 1): how many copies of one
        fault the notifier waits for before it posts (:mod:`poolwatch.notify.delivery`)."""
        want = (labels.get("worker", ""), labels.get("dp_rank", "0"), labels.get("pp_rank", "0"))
        found = sum(
            1
            for s in self.latest()
            if (s.worker.worker, str(s.worker.dp_rank), str(s.worker.pp_rank)) == want
        )
        return max(1, found)

    def get(self, key: str) -> Snapshot | None:
        with self._lock:
            rank = self._ranks.get(key)
            return None if rank is None else self._view(rank)

    def sources(self, key: str) -> list[Snapshot]:
        """The latest snapshot of each source of the rank, most exact first."""
        with self._lock:
            rank = self._ranks.get(key)
            views = [] if rank is None else [v.latest for v in rank.sources.values()]
        return sorted(views, key=lambda s: _preference(s.source))

    def history(self, key: str) -> list[Snapshot]:
        """The rank's recent snapshots from all its sources, oldest first (empty for an unknown rank)."""
        with self._lock:
            rank = self._ranks.get(key)
            snaps = [] if rank is None else [s for v in rank.sources.values() for s in v.history]
        return sorted(snaps, key=lambda s: s.taken_at)

    def incident_counts(self, key: str) -> Counter[IncidentKind]:
        """How many incidents of each kind the rank ``key`` logged (over every source and boot)."""
        with self._lock:
            rank = self._ranks.get(key)
            return Counter() if rank is None else Counter(rank.incidents)

    def incident_times(self, key: str) -> tuple[float | None, dict[IncidentKind, float]]:
        """When the rank ``key`` last restarted (None: never seen to) and logged each incident kind."""
        with self._lock:
            rank = self._ranks.get(key)
            return (None, {}) if rank is None else (rank.restarted_at, dict(rank.incident_at))

    def forget_silent(self, before: float) -> list[str]:
        """Drop the ranks no source has reported since ``before`` (store clock); returns their keys."""
        with self._lock:
            gone = sorted(k for k, r in self._ranks.items() if r.seen_at < before)
            for key in gone:
                self._views -= len(self._ranks.pop(key).sources)
        return gone

    def __len__(self) -> int:
        """How many ranks the store holds."""
        with self._lock:
            return len(self._ranks)

    def _view(self, rank: RankState) -> Snapshot:
        return best_view((v.latest for v in rank.sources.values()), self._fresh_within)

    def record_success(self, name: str, source: str, duration: float, at: float, worker: str = "") -> None:
        self._update_target(name, source, worker, up=True, duration=duration, at=at, reason=None, error="")

    def record_failure(
        self, name: str, source: str, duration: float, reason: Reason, error: str, worker: str = ""
    ) -> None:
        self._update_target(
            name, source, worker, up=False, duration=duration, at=None, reason=reason, error=error
        )

    def _update_target(
        self,
        name: str,
        source: str,
        worker: str,
        *,
        up: bool,
        duration: float,
        at: float | None,
        reason: Reason | None,
        error: str,
    ) -> None:
        with self._lock:
            old = self._targets.get(name) or TargetState(name, source, worker=worker)
            errors = old.errors  # shared with the old state while nothing is added (never changed in place)
            if reason is not None:
                errors = Counter(old.errors)
                errors[reason] += 1
            self._targets[name] = TargetState(
                old.name,
                old.source,
                up,
                old.worker,
                old.scrapes + 1,
                duration,
                at if up else old.last_success_at,
                error,
                errors,
            )

    def targets(self) -> list[TargetState]:
        with self._lock:
            return [self._targets[k] for k in sorted(self._targets)]

    def forget_targets(self, keep: Iterable[str]) -> None:
        """Drop targets no longer configured or discovered (their series disappear)."""
        keep_set = set(keep)
        with self._lock:
            for name in [n for n in self._targets if n not in keep_set]:
                del self._targets[name]

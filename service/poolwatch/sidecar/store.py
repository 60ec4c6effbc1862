"""The sidecar's state: the latest snapshot and a bounded history per rank, and each target's health.

Written by the scrape loop, read by the collectors and the API.  A lock keeps readers on other
threads (the ``/metrics`` route runs in a worker thread) consistent; every operation is O(1) or
O(ranks).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from poolwatch.errors import Reason
from poolwatch.model import IncidentKind, Snapshot
from poolwatch.target_health import TargetState

__all__ = ["RankState", "SnapshotStore", "TargetState"]


@dataclass(slots=True)
class RankState:
    """The latest snapshot of one rank, its recent history and its incident counters."""

    latest: Snapshot
    history: deque[Snapshot]
    incidents: Counter[IncidentKind] = field(default_factory=Counter)


class SnapshotStore:
    """Latest snapshot + bounded ring per rank (keyed by ``WorkerId.key``) and target health."""

    def __init__(self, history: int = 256, on_snapshot: Callable[[Snapshot], None] | None = None) -> None:
        if history < 1:
            raise ValueError("history must be at least 1")
        self._history = history
        self._ranks: dict[str, RankState] = {}
        self._targets: dict[str, TargetState] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Snapshot], None]] = [] if on_snapshot is None else [on_snapshot]

    def subscribe(self, listener: Callable[[Snapshot], None]) -> None:
        """Call ``listener`` with every new snapshot (the detector subscribes)."""
        self._listeners.append(listener)

    def put(self, snap: Snapshot) -> bool:
        """Keep ``snap`` as the rank's latest unless it is older than what we have.

        Returns False (and keeps nothing) for a duplicate or out-of-order snapshot of the same
        boot.  A new ``boot_id`` (scheduler restarted, sequence reset) starts a fresh history.
        """
        with self._lock:
            state = self._ranks.get(snap.worker.key)
            if state is None or state.latest.boot_id != snap.boot_id:
                state = RankState(snap, deque(maxlen=self._history))
                self._ranks[snap.worker.key] = state
            elif snap.seq <= state.latest.seq and snap.taken_at <= state.latest.taken_at:
                return False
            state.incidents.update(i.kind for i in snap.incidents)
            state.latest = snap
            state.history.append(snap)
        for listener in self._listeners:
            listener(snap)
        return True

    def latest(self) -> list[Snapshot]:
        """The latest snapshot of every rank, ordered by rank key."""
        with self._lock:
            return [self._ranks[k].latest for k in sorted(self._ranks)]

    def get(self, key: str) -> Snapshot | None:
        with self._lock:
            state = self._ranks.get(key)
            return None if state is None else state.latest

    def history(self, key: str) -> list[Snapshot]:
        """The rank's recent snapshots, oldest first (empty for an unknown rank)."""
        with self._lock:
            state = self._ranks.get(key)
            return [] if state is None else list(state.history)

    def incidents(self, key: str) -> Counter[IncidentKind]:
        with self._lock:
            state = self._ranks.get(key)
            return Counter() if state is None else Counter(state.incidents)

    def record_success(self, name: str, source: str, duration: float, at: float) -> None:
        self._update_target(name, source, up=True, duration=duration, at=at, reason=None, error="")

    def record_failure(self, name: str, source: str, duration: float, reason: Reason, error: str) -> None:
        self._update_target(name, source, up=False, duration=duration, at=None, reason=reason, error=error)

    def _update_target(
        self,
        name: str,
        source: str,
        *,
        up: bool,
        duration: float,
        at: float | None,
        reason: Reason | None,
        error: str,
    ) -> None:
        with self._lock:
            old = self._targets.get(name) or TargetState(name, source)
            errors = Counter(old.errors)
            if reason is not None:
                errors[reason] += 1
            self._targets[name] = replace(
                old,
                up=up,
                scrapes=old.scrapes + 1,
                last_duration=duration,
                last_success_at=at if up else old.last_success_at,
                last_error=error,
                errors=errors,
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

"""Custom collectors over the :class:`~poolwatch.sidecar.store.SnapshotStore`.

They build fresh metric families on every scrape from the catalogue, so a rank or target that
disappears simply stops being exported.  Their samples go through
:class:`~poolwatch.sidecar.metrics.families.Families`.  Sample exposition::

    poolwatch_pool_capacity_slots{worker="prefill-0",role="prefill",...,pool="mamba"} 476.0
    poolwatch_pool_slots{...,pool="mamba",state="available"} 473.0
    poolwatch_pool_conservation_gap_slots{...,pool="mamba"} -1.0
    poolwatch_target_up{target="file:seed.json",source="file"} 1.0
"""

from __future__ import annotations

from collections.abc import Callable

from poolwatch.catalog.spec import rank_label_values
from poolwatch.conservation import findings, used
from poolwatch.model.rank import Exactness, Phase, PoolAccount
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.metrics.families import Families, FamiliesCollector
from poolwatch.sidecar.metrics.waiting import WAITING_METRICS, add_waiting
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.target_state import TargetState

__all__ = ["InfoCollector", "PoolCollector", "TargetCollector", "rank_labels"]

_STATES = ("available", "evictable", "protected", "held", "session_held")


def rank_labels(snap: Snapshot) -> tuple[str, ...]:
    """The label values of ``snap``'s rank, in catalogue order."""
    return rank_label_values(snap.worker)


_RANK_METRICS = (
    "poolwatch_worker_info",
    "poolwatch_worker_idle",
    "poolwatch_scheduler_iteration",
    "poolwatch_snapshot_timestamp_seconds",
    "poolwatch_snapshot_age_seconds",
    "poolwatch_snapshot_stale",
    "poolwatch_queue_requests",
    "poolwatch_idle_check_strict",
    "poolwatch_incidents_total",
    "poolwatch_incident_last_timestamp_seconds",
    "poolwatch_rank_restart_timestamp_seconds",
    "poolwatch_probe_samples_total",
    "poolwatch_probe_errors_total",
    "poolwatch_probe_sample_duration_seconds",
    "poolwatch_probe_census_duration_seconds",
    "poolwatch_probe_disabled",
    "poolwatch_probe_tripwires_dropped_total",
    "poolwatch_probe_repairs_total",
)
_POOL_METRICS = (
    "poolwatch_pool_capacity_slots",
    "poolwatch_pool_slots",
    "poolwatch_pool_used_slots",
    "poolwatch_pool_conservation_gap_slots",
    "poolwatch_pool_figures_exact",
    "poolwatch_pool_tripwire_slots",
    "poolwatch_pool_counter_drift_slots",
)


class PoolCollector(FamiliesCollector):
    """Per-rank and per-pool figures of each rank's view (its most exact fresh source).

    A stale rank (a dead worker) keeps its last *findings* -- conservation gap, tripwire slots,
    capacity and idle-check strictness -- until it restarts or is forgotten, so the Prometheus
    rules keep firing exactly as long as the sidecar's own alerts do and a dashboard never shows
    it as healthy; its slot figures, queues and phase are withheld (never shown as current)."""

    names = _POOL_METRICS + WAITING_METRICS + _RANK_METRICS  # its families, in exposition order

    def __init__(self, store: SnapshotStore, clock: Callable[[], float], stale_after: float) -> None:
        self._store = store
        self._clock = clock
        self._stale_after = stale_after

    def fill(self, fam: Families) -> None:
        now = self._clock()
        for snap in self._store.latest():
            self.add_snapshot(fam, snap, now)

    def is_stale(self, snap: Snapshot, now: float) -> bool:
        return now - snap.taken_at > self._stale_after

    def add_snapshot(self, fam: Families, snap: Snapshot, now: float) -> None:
        """Every sample of one rank's view at ``now`` (the age sample is the only one that
        changes with ``now`` alone; the rest change with the snapshot, staleness and incidents)."""
        stale = self.is_stale(snap, now)
        self._add_rank(fam, snap, now, stale)
        for account in snap.pools.values():
            self._add_pool(fam, snap, account, stale)
        self._add_tripwires(fam, snap)
        if not stale:
            add_waiting(fam, snap)
        for w in snap.witnesses:  # kept while stale, like the findings: the drift stands until a census
            labels = (*rank_labels(snap), w.pool.value, w.figure)
            fam.add("poolwatch_pool_counter_drift_slots", labels, w.drift)
        for r in snap.repairs:  # kept while stale, like the findings: the warning stands until a restart
            fam.add(
                "poolwatch_probe_repairs_total", (*rank_labels(snap), r.pool.value, r.kind.value), r.count
            )

    def _add_rank(self, fam: Families, snap: Snapshot, now: float, stale: bool) -> None:
        labels = rank_labels(snap)
        w = snap.worker
        verified = "true" if w.release_verified else "false"
        info = (*labels, w.model, w.release, snap.source, w.engine, w.release, verified)
        fam.add("poolwatch_worker_info", info, 1)
        fam.add("poolwatch_scheduler_iteration", labels, snap.seq)
        fam.add("poolwatch_snapshot_timestamp_seconds", labels, snap.taken_at)
        fam.add("poolwatch_snapshot_age_seconds", labels, max(0.0, now - snap.taken_at))
        fam.add("poolwatch_snapshot_stale", labels, float(stale))
        for kind, count in sorted(self._store.incident_counts(w.key).items()):
            fam.add("poolwatch_incidents_total", (*labels, kind.value), count)
        restarted_at, incident_at = self._store.incident_times(w.key)
        for kind, at in sorted(incident_at.items()):
            fam.add("poolwatch_incident_last_timestamp_seconds", (*labels, kind.value), at)
        if restarted_at is not None:
            fam.add("poolwatch_rank_restart_timestamp_seconds", labels, restarted_at)
        if snap.idle_check_strict is not None:
            fam.add("poolwatch_idle_check_strict", labels, float(snap.idle_check_strict))
        if stale:
            return
        if snap.phase is not Phase.UNKNOWN:
            fam.add("poolwatch_worker_idle", labels, float(snap.phase is Phase.IDLE))
        for queue, depth in sorted(snap.queues.items()):
            fam.add("poolwatch_queue_requests", (*labels, queue), depth)
        if snap.probe is not None:
            p = snap.probe
            fam.add("poolwatch_probe_samples_total", labels, p.samples_total)
            fam.add("poolwatch_probe_errors_total", labels, p.errors_total)
            fam.add("poolwatch_probe_sample_duration_seconds", labels, p.sample_cost_seconds)
            fam.add("poolwatch_probe_census_duration_seconds", labels, p.census_cost_seconds)
            fam.add("poolwatch_probe_disabled", labels, float(p.disabled))
            fam.add("poolwatch_probe_tripwires_dropped_total", labels, p.tripwires_dropped)

    @staticmethod
    def _add_pool(fam: Families, snap: Snapshot, account: PoolAccount, stale: bool) -> None:
        labels = (*rank_labels(snap), account.pool.value)
        if account.size is not None:
            fam.add("poolwatch_pool_capacity_slots", labels, account.size)
        finding = findings(snap)[account.pool]
        if stale:
            if finding.gap is not None:  # the last finding stands until the rank restarts
                fam.add("poolwatch_pool_conservation_gap_slots", labels, finding.gap)
            return
        for state in _STATES:
            value = getattr(account, state)
            if value is not None:
                fam.add("poolwatch_pool_slots", (*labels, state), value)
        used_slots = used(account)
        if used_slots is not None:
            fam.add("poolwatch_pool_used_slots", labels, used_slots)
        if finding.gap is not None:
            fam.add("poolwatch_pool_conservation_gap_slots", labels, finding.gap)
        fam.add("poolwatch_pool_figures_exact", labels, float(account.exactness is Exactness.EXACT))

    @staticmethod
    def _add_tripwires(fam: Families, snap: Snapshot) -> None:
        counts: dict[tuple[str, str], int] = {}
        for t in snap.tripwires:
            key = (t.pool.value, t.kind.value)
            counts[key] = counts.get(key, 0) + t.count
        for (pool, kind), n in sorted(counts.items()):
            fam.add("poolwatch_pool_tripwire_slots", (*rank_labels(snap), pool, kind), n)


_TARGET_METRICS = (
    "poolwatch_target_up",
    "poolwatch_target_scrape_duration_seconds",
    "poolwatch_target_last_success_timestamp_seconds",
    "poolwatch_target_scrapes_total",
    "poolwatch_target_scrape_errors_total",
)


class TargetCollector(FamiliesCollector):
    """The sidecar's own view of each target: up, duration, last success, errors by reason."""

    names = _TARGET_METRICS

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

    def fill(self, fam: Families) -> None:
        for t in self._store.targets():
            self.add_target(fam, t)

    @staticmethod
    def add_target(fam: Families, t: TargetState) -> None:
        labels = (t.name, t.source, t.worker)
        fam.add("poolwatch_target_up", labels, float(t.up))
        fam.add("poolwatch_target_scrape_duration_seconds", labels, t.last_duration)
        fam.add("poolwatch_target_scrapes_total", labels, t.scrapes)
        if t.last_success_at is not None:
            fam.add("poolwatch_target_last_success_timestamp_seconds", labels, t.last_success_at)
        for reason, count in sorted(t.errors.items()):
            fam.add("poolwatch_target_scrape_errors_total", (*labels, reason.value), count)


class InfoCollector(FamiliesCollector):
    """One static fact as an ``_info`` metric of value 1, the fact its one label: the build's
    version, or the pod this sidecar serves (so Prometheus can tell when it reads one pod's sidecar
    as another's, ``PoolwatchSidecarIdentityCrossed``)::

        poolwatch_build_info{version="0.1.0"} 1.0
        poolwatch_sidecar_info{sidecar_pod="decode-0"} 1.0
    """

    def __init__(self, name: str, value: str) -> None:
        self.names, self._value = (name,), value

    def fill(self, fam: Families) -> None:
        fam.add(self.names[0], (self._value,), 1)

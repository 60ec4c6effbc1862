"""The detector: every rank's snapshot stream in, alerts out.

Pure: it is fed every accepted snapshot (``observe``; the sidecar subscribes it to its store) and
is evaluated on a timer with the latest snapshot of every rank and the scrape targets' health
(``evaluate``), so staleness, dead targets and hold times are judged even when no snapshot
arrives.  It imports no store, settings, HTTP or metrics library.  Each source of a rank (the probe, SGLang's
``/metrics``, its log) judges the pool alerts on its own: a snapshot that cannot tell (coarse
figures while busy) never counts as clean, and when a source reports a restart (new ``boot_id``)
the rank's sampled alerts (of every source) resolve unless the new boot shows them again, that
source's trend windows start over, and a restart also ends the rank's log
incidents (a crash or failed idle check read before the new boot resolves at once, as the
generated rules do by comparing the incident and restart timestamps).  Alerts with the same labels from
two sources are merged into one.  What each snapshot, log line and timer turn shows is judged by
the families' judges (:class:`~poolwatch.detect.judges.Judges`); the state machine itself is
:class:`~poolwatch.detect.tracker.Tracker`; a lock makes the detector safe to read from the
``/metrics`` thread.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from poolwatch.conservation import Basis, findings
from poolwatch.detect.alert import Alert, Signal, forget_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.family import Seen, Tick
from poolwatch.detect.judges import JudgedMemo, Judges
from poolwatch.detect.rules import by_name
from poolwatch.detect.schema import dashboard_link
from poolwatch.detect.stranded import stranded_slots
from poolwatch.detect.tracker import Tracker
from poolwatch.detect.trend import GapSeries, PoolTrend, best_trends, fitted
from poolwatch.model.rank import Pool, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.target_state import DirectoryHealth, TargetState

__all__ = ["RESTARTED", "Detector"]

RESTARTED = "the rank restarted (a new boot) after the incident"


@dataclass(slots=True)
class _Rank:
    """One rank as one source sees it."""

    boot_id: str
    worker: WorkerId
    source: str
    series: dict[Pool, GapSeries] = field(default_factory=dict)
    probe_errors: deque[tuple[float, int]] = field(default_factory=deque)
    judged: JudgedMemo = field(default_factory=JudgedMemo)


class Detector:
    def __init__(
        self,
        config: DetectorConfig | MixinConfig,
        clock: Callable[[], float],
        *,
        extra_labels: Mapping[str, str] | None = None,
        memo: bool = True,
    ) -> None:
        """``config``: the thresholds, or the whole mixin config (thresholds, runbook and
        dashboard links) that the generated rules are built from too.  ``memo=False`` builds every
        snapshot's verdict set from scratch (the reference the tests compare the memoised one with)."""
        self._mixin = config if isinstance(config, MixinConfig) else MixinConfig(detector=config)
        self._cfg = self._mixin.detector
        self._clock = clock
        self._extra = {k: v for k, v in (extra_labels or {}).items() if v}  # e.g. the namespace
        self._ranks: dict[str, _Rank] = {}
        self._incident_at: dict[str, dict[str, float]] = {}  # rank key -> alert -> last read
        self._judges = Judges(self._cfg)
        self._tracker = Tracker(self._cfg, self._annotate)
        self._lock = threading.Lock()
        self._memo = memo

    def observe(self, snap: Snapshot) -> None:
        """Judge one accepted snapshot (the store's listener)."""
        now = self._clock()
        subject = sampled_subject(snap)
        with self._lock:
            rank = self._rank(subject, snap, now)
            seen = Seen(snap, findings(snap), fitted(rank.series), self._errors_before(rank, snap))
            judges = self._judges
            judged = rank.judged.judged_by(seen, judges) if self._memo else judges.judged(seen)
            self._tracker.sample(subject, judges.signals(seen), judged, (snap.boot_id, snap.seq), now)
            if snap.incidents:
                self._incidents(snap, now)

    def evaluate(
        self,
        now: float | None = None,
        *,
        latest: Sequence[Snapshot] | None = None,
        targets: Sequence[TargetState] | None = None,
        directory: DirectoryHealth | None = None,
    ) -> list[Alert]:
        """The timer's turn: hold times, and -- when the caller passes them -- staleness of the
        ``latest`` snapshot of every rank and the health of every scrape ``target``.  Returns
        every alert."""
        now = self._clock() if now is None else now
        with self._lock:
            for alerts, signals in self._judges.ticked(Tick(now, latest, targets, directory)):
                self._tracker.timed(alerts, signals, now)
            self._tracker.tick(now)
            return self._labelled(self._tracker.alerts())

    def alerts(self) -> list[Alert]:
        with self._lock:
            return self._labelled(self._tracker.alerts())

    def fired(self) -> int:
        """How many times an alert has started firing so far: a cheap "anything new to page?"
        check for every stored snapshot (O(1), unlike listing the alerts)."""
        return self._tracker.fired

    def trends(self) -> list[PoolTrend]:
        """The fitted leak rate (and exhaustion ETA) of every pool with enough history."""
        with self._lock:
            return best_trends((rank.worker, rank.source, rank.series) for rank in self._ranks.values())

    def forget(self, keys: Iterable[str], reason: str, now: float | None = None) -> int:
        """Ranks gone for good (``WorkerId.key``): their alerts resolve with ``reason`` and their
        state goes, so memory stays bounded however many ranks come and go.  Returns how many
        alerts resolved."""
        gone = set(keys)
        now = self._clock() if now is None else now

        def of_gone_rank(sig: Signal) -> bool:
            return sig.subject.partition("@")[0] in gone

        with self._lock:
            for subject in [s for s in self._ranks if s.partition("@")[0] in gone]:
                del self._ranks[subject]
            for key in gone:
                self._incident_at.pop(key, None)
            if gone:
                forget_labels()  # the gone ranks' label sets go too (memory returned, issue 24)
            return self._tracker.forget(of_gone_rank, reason, now)

    def sizes(self) -> dict[str, int]:
        """What the detector holds: rank-source states and alert instances (for bounds checks)."""
        with self._lock:
            return {"rank_sources": len(self._ranks), "alerts": len(self._tracker)}

    def restore(self, alerts: Iterable[Alert]) -> None:
        """Take back the firing alerts persisted before a restart (see :mod:`.persist`)."""
        own = [replace(a, labels=tuple((k, v) for k, v in a.labels if k not in self._extra)) for a in alerts]
        with self._lock:
            self._tracker.restore(own, self._clock())

    def _rank(self, subject: str, snap: Snapshot, now: float) -> _Rank:
        rank = self._ranks.get(subject)
        if rank is None or rank.boot_id != snap.boot_id:
            if rank is not None:
                self._restart(snap.worker.key, now)
            rank = _Rank(snap.boot_id, snap.worker, snap.source)
            self._ranks[subject] = rank
        rank.worker = snap.worker
        stranded = stranded_slots(snap, self._cfg) if snap.holds else {}
        for pool, finding in findings(snap).items():
            account = snap.pools[pool]
            if finding.gap is not None and finding.basis in (Basis.EXACT, Basis.IDLE_RESIDUAL):
                free = None
                if account.available is not None:
                    free = account.available + (account.evictable or 0)
                series = rank.series.get(account.pool)
                if series is None:
                    series = rank.series[account.pool] = GapSeries(self._cfg.trend_window)
                series.add(snap.taken_at, finding.gap + stranded.get(pool, 0), free)
        return rank

    def _restart(self, key: str, now: float) -> None:
        """Rank ``key`` was seen in a new boot ``now`` (by any of its sources: a boot is the
        process's): every source's sampled alerts of the old boot hold until the new boot shows
        them again or ``resolve_hold`` ends, and the incidents read before are over.  Times are this
        detector's clock, as the store's (a log's own timestamps may be skewed)."""
        for subject in [s for s in self._ranks if s.partition("@")[0] == key]:
            self._tracker.reset(subject, now)
        logged = self._incident_at.pop(key, {})
        ended = {alert for alert, when in logged.items() if when < now}
        if ended:
            self._tracker.forget(lambda sig: sig.subject == key and sig.alert in ended, RESTARTED, now)

    def _incidents(self, snap: Snapshot, now: float) -> None:
        signals = self._judges.events_of(snap, now)
        if signals:
            self._incident_at.setdefault(snap.worker.key, {}).update((s.alert, now) for s in signals)
            self._tracker.events(signals, now)

    def _errors_before(self, rank: _Rank, snap: Snapshot) -> int | None:
        if snap.probe is None:
            return None
        errors, window = rank.probe_errors, self._cfg.probe_error_window
        if errors and errors[-1][1] > snap.probe.errors_total:
            errors.clear()  # the counter went back: a new probe without a new boot id
        errors.append((snap.taken_at, snap.probe.errors_total))
        while len(errors) > 1 and errors[1][0] <= snap.taken_at - window:
            errors.popleft()
        return errors[0][1]

    def _annotate(self, sig: Signal) -> dict[str, str]:
        definition = by_name(sig.alert)
        labels = {**dict(sig.labels), **self._extra}

        def value(label: str) -> str | None:
            return urllib.parse.quote(labels[label], safe="") if label in labels else None

        mixin = self._mixin
        return {
            "summary": definition.summary,
            "description": sig.description,
            "runbook_url": definition.runbook_url(mixin.runbook_base_url),
            "dashboard_url": mixin.dashboard_url.rstrip("/") + dashboard_link(definition.scope, value, mixin),
        }

    def _labelled(self, alerts: list[Alert]) -> list[Alert]:
        if not self._extra:
            return alerts
        return [replace(a, labels=tuple(sorted({**self._extra, **dict(a.labels)}.items()))) for a in alerts]

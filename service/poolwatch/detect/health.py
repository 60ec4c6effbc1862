"""The health families: whether poolwatch's watch of a rank works.  Pure.

* :class:`ProbeDegradation`, on every snapshot carrying the probe's health: its kill switch engaged
  -> PoolwatchProbeDegraded warning; errors contained within ``probe_error_window`` -> info;
* :class:`Staleness`, on the timer: a rank whose latest snapshot is stale -> PoolwatchSnapshotStale;
* :class:`TargetHealth`, on the timer: a target whose scrapes fail -> PoolwatchTargetDown.

A timed family's verdict is every instance of its alert: one the timer no longer signals is clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import Seen, first_line, where
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.model.snapshot import Snapshot
from poolwatch.target_state import TargetState

__all__ = ["ProbeDegradation", "Staleness", "TargetHealth"]


@dataclass(frozen=True, slots=True)
class ProbeDegradation:
    """PoolwatchProbeDegraded, per rank, judged on every snapshot that carries the probe's health."""

    config: DetectorConfig
    alerts = (AlertName.PROBE_DEGRADED,)
    mode = Mode.SAMPLED

    def signals(self, seen: Seen) -> list[Signal]:
        """``seen.errors_before``: the probe's error count at the start of the window."""
        snap, p = seen.snap, seen.snap.probe
        if p is None:
            return []
        labels = rank_labels(snap.worker)
        if p.disabled:
            text = (
                f"The poolwatch probe in {where(snap)} is disabled ({p.last_error or 'kill switch engaged'})."
            )
            wait = self.config.probe_disabled_for
            degraded = AlertName.PROBE_DEGRADED
            return [Signal(degraded, snap.worker.key, Severity.WARNING, labels, text, 1.0, for_seconds=wait)]
        new = p.errors_total - seen.errors_before if seen.errors_before is not None else 0
        if new > 0:
            last = f"; last: {first_line(p.last_error)}" if p.last_error else ""
            text = f"The poolwatch probe in {where(snap)} contained {new} error(s) recently{last}."
            subject = sampled_subject(snap)
            return [Signal(AlertName.PROBE_DEGRADED, subject, Severity.INFO, labels, text, float(new))]
        return []

    def signature(self, seen: Seen) -> bool:
        """Whether the snapshot carries the probe's health."""
        return seen.snap.probe is not None

    def judged(self, seen: Seen) -> set[Verdict]:
        if seen.snap.probe is None:
            return set()
        return {(AlertName.PROBE_DEGRADED, rank_labels(seen.snap.worker))}


@dataclass(frozen=True, slots=True)
class Staleness:
    """PoolwatchSnapshotStale, per rank, judged on the timer from every rank's latest snapshot."""

    config: DetectorConfig
    alerts = (AlertName.SNAPSHOT_STALE,)
    mode = Mode.TIMED

    def signals(self, latest: Iterable[Snapshot], now: float) -> list[Signal]:
        cfg, out = self.config, []
        for snap in latest:
            age = now - snap.taken_at
            if age > cfg.stale_after:
                text = (
                    f"The latest snapshot of {where(snap)} (source {snap.source}) is {age:.0f} s old; "
                    f"its memory pools are not being watched."
                )
                stale, labels = AlertName.SNAPSHOT_STALE, rank_labels(snap.worker)
                wait = cfg.stale_for
                out.append(
                    Signal(stale, snap.worker.key, Severity.WARNING, labels, text, age, for_seconds=wait)
                )
        return out


@dataclass(frozen=True, slots=True)
class TargetHealth:
    """PoolwatchTargetDown, per scrape target, judged on the timer from the targets' health."""

    config: DetectorConfig
    alerts = (AlertName.TARGET_DOWN,)
    mode = Mode.TIMED

    def signals(self, targets: Sequence[TargetState], now: float) -> list[Signal]:
        out = []
        for t in targets:
            if t.up:
                continue
            ago = (
                "never succeeded"
                if t.last_success_at is None
                else f"last success {now - t.last_success_at:.0f} s ago"
            )
            error = first_line(t.last_error) or "no answer"
            text = f"poolwatch cannot scrape {t.source} target {t.name} ({ago}): {error}."
            named = (("source", t.source), ("target", t.name), ("worker", t.worker))
            labels = tuple((k, v) for k, v in named if v)  # worker: a crash of it inhibits this alert
            down, wait = AlertName.TARGET_DOWN, self.config.target_down_for
            out.append(Signal(down, t.name, Severity.WARNING, labels, text, 0.0, for_seconds=wait))
        return out

"""The detector's values: a :class:`Signal` (what one observation shows) and an :class:`Alert`
(what the detector holds: pending, firing or recently resolved).  Frozen, no I/O."""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from poolwatch.catalog.spec import RANK_LABELS, rank_label_values
from poolwatch.detect.schema import Severity
from poolwatch.model.rank import Role, WorkerId
from poolwatch.model.snapshot import Snapshot

__all__ = [
    "Alert",
    "AlertState",
    "Labels",
    "Signal",
    "Verdict",
    "forget_labels",
    "merge",
    "rank_labels",
    "sampled_subject",
]

Labels = tuple[tuple[str, str], ...]  # identity labels, sorted by name; no alertname, no severity
Verdict = tuple[str, Labels]  # an alert name and the identity labels of one instance


def sampled_subject(snap: Snapshot) -> str:
    """Who judges what a snapshot shows: one rank as seen by one source (``key@source``)."""
    return f"{snap.worker.key}@{snap.source}"


def rank_labels(worker: WorkerId, pool: str = "") -> Labels:
    """The identity labels of a rank (and a pool), as the exporter labels its series, sorted by
    name (an alert's identity).  Built once per rank and pool: every snapshot asks for them a
    dozen times, and each snapshot decodes a new (equal) ``WorkerId``."""
    return _labels((worker.worker, worker.role, worker.dp_rank, worker.tp_rank, worker.pp_rank), pool)


@functools.lru_cache(maxsize=1 << 14)
def _labels(identity: tuple[str, Role, int, int, int], pool: str) -> Labels:
    pairs = dict(zip(RANK_LABELS, rank_label_values(WorkerId(*identity, engine="")), strict=True))
    if pool:
        pairs["pool"] = pool
    return tuple(sorted(pairs.items()))


def forget_labels() -> None:
    """Drop the memo of :func:`rank_labels` (called when ranks are forgotten): under churn of new
    worker names it would otherwise keep up to 16,384 label sets of ranks long gone (~1 KB each);
    the live ranks' sets are rebuilt at their next snapshot."""
    _labels.cache_clear()


class AlertState(enum.StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Signal:
    """One observation that an alert's condition holds for one subject.

    ``subject`` is what judges it: ``<rank key>@<source>`` for what snapshots show (each source
    of a rank judges its own alerts; a restart it reports resets them), the rank key for log
    incidents and staleness, the target name for target health.  ``min_samples`` distinct samples
    and ``for_seconds`` seconds must pass before a sampled alert fires (1 and 0: at once).
    """

    alert: str
    subject: str
    severity: Severity
    labels: Labels
    description: str
    value: float
    min_samples: int = 1
    for_seconds: float = 0.0

    @property
    def verdict(self) -> Verdict:
        """What this signal is a verdict on: the alert and its identity labels."""
        return (self.alert, self.labels)

    @property
    def key(self) -> tuple[str, Labels, str]:
        return (self.alert, self.labels, self.subject)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert instance as the detector holds it.  Times are unix seconds."""

    name: str
    subject: str
    severity: Severity
    state: AlertState
    labels: Labels
    annotations: Mapping[str, str]
    value: float
    active_since: float  # when the condition was first seen (pending began)
    fired_at: float | None = None
    resolved_at: float | None = None
    last_seen: float = 0.0  # the latest observation of the condition

    @property
    def all_labels(self) -> dict[str, str]:
        """The labels a receiver sees: ``alertname``, ``severity`` and the identity labels."""
        return {"alertname": self.name, "severity": self.severity.value, **dict(self.labels)}

    @property
    def fingerprint(self) -> str:
        """Stable identity of the label set (a change of severity is a different alert)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.all_labels.items()))


_RANK = {AlertState.FIRING: 0, AlertState.PENDING: 1, AlertState.RESOLVED: 2}


def merge(alerts: Iterable[Alert]) -> list[Alert]:
    """One alert per label set: when two sources of a rank hold the same alert, the firing one
    (the earliest) wins, then the pending one, then the latest resolution."""
    best: dict[str, Alert] = {}
    for a in alerts:
        held = best.get(a.fingerprint)
        if held is None or _better(a, held):
            best[a.fingerprint] = a
    return sorted(best.values(), key=lambda a: (a.name, a.labels, a.severity.value))


def _better(a: Alert, b: Alert) -> bool:
    if _RANK[a.state] != _RANK[b.state]:
        return _RANK[a.state] < _RANK[b.state]
    if a.state is AlertState.RESOLVED:
        return (a.resolved_at or 0.0) > (b.resolved_at or 0.0)
    return (a.fired_at or a.active_since) < (b.fired_at or b.active_since)

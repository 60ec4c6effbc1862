"""The detector's and the notifiers' metrics, built fresh from the catalogue on every scrape.

Sample exposition::

    poolwatch_alert_active{alertname="PoolwatchDoubleFree",severity="critical",worker="prefill-0",...,
                           pool="mamba",state="firing"} 1.0
    poolwatch_pool_leak_rate_slots_per_second{worker="prefill-0",...,pool="full"} 0.1
    poolwatch_pool_exhaustion_eta_seconds{worker="prefill-0",...,pool="full"} 20000.0
    poolwatch_notifications_total{receiver="alertmanager:am.example:9093",outcome="sent"} 4.0
    poolwatch_notification_queue_length{receiver="alertmanager:am.example:9093"} 0.0

A target-scoped alert (PoolwatchTargetDown) has no rank: its ``worker`` label carries the worker
whose target it is (else the target's name) and the rank labels are empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from poolwatch.catalog.metrics import by_name
from poolwatch.catalog.spec import rank_label_values
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.detector import Detector
from poolwatch.notify.delivery import DeliveryStats
from poolwatch.sidecar.metrics.families import Families, FamiliesCollector

__all__ = ["AlertCollector"]

_NAMES = (
    "poolwatch_alert_active",
    "poolwatch_pool_leak_rate_slots_per_second",
    "poolwatch_pool_exhaustion_eta_seconds",
    "poolwatch_notifications_total",
    "poolwatch_notification_queue_length",
)
_OUTCOMES = ("sent", "failed", "dropped")


def _alert_labels(alert: Alert) -> list[str]:
    labels = alert.all_labels
    if "target" in labels:  # a target has no rank: its worker, else the target, names it
        labels["worker"] = labels.get("worker") or labels["target"]
    names = by_name("poolwatch_alert_active").labels
    return [alert.state.value if n == "state" else labels.get(n, "") for n in names]


class AlertCollector(FamiliesCollector):
    """Pending and firing alerts, fitted leak trends, and delivery self-metrics."""

    names = _NAMES

    def __init__(self, detector: Detector, stats: Callable[[], Sequence[DeliveryStats]] = tuple) -> None:
        self._detector = detector
        self._stats = stats

    def fill(self, fam: Families) -> None:
        for alert in self._detector.alerts():
            if alert.state is not AlertState.RESOLVED:
                fam.add("poolwatch_alert_active", _alert_labels(alert), 1)
        for t in self._detector.trends():
            labels = (*rank_label_values(t.worker), t.pool.value)
            fam.add("poolwatch_pool_leak_rate_slots_per_second", labels, t.trend.rate)
            if t.trend.eta is not None:
                fam.add("poolwatch_pool_exhaustion_eta_seconds", labels, t.trend.eta)
        for s in self._stats():
            for outcome in _OUTCOMES:
                fam.add("poolwatch_notifications_total", (s.receiver, outcome), s.counts.get(outcome, 0))
            fam.add("poolwatch_notification_queue_length", (s.receiver,), s.queued)

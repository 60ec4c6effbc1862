"""The shape of a catalogue entry: the label sets, a rank's label values, and :class:`MetricSpec`.

:mod:`poolwatch.catalog.metrics` holds the one catalogue of metrics built from these; the rank label
values are taken from :func:`rank_label_values` by the exporter, the alert collector and the
detector's alerts alike.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poolwatch.model.rank import WorkerId

__all__ = [
    "ALERT_LABELS",
    "POOL_LABELS",
    "RANK_LABELS",
    "TARGET_LABELS",
    "Kind",
    "MetricSpec",
    "counter",
    "gauge",
    "rank_label_values",
]

RANK_LABELS: tuple[str, ...] = ("worker", "role", "dp_rank", "tp_rank", "pp_rank")
POOL_LABELS: tuple[str, ...] = (*RANK_LABELS, "pool")
TARGET_LABELS: tuple[str, ...] = ("target", "source", "worker")  # worker: whose target (inhibition)
ALERT_LABELS: tuple[str, ...] = ("alertname", "severity", *RANK_LABELS, "pool")


def rank_label_values(worker: WorkerId) -> tuple[str, ...]:
    """A rank's label values in :data:`RANK_LABELS` order: the one place the exporter, the alert
    collector and the detector's alerts take a rank's labels from."""
    values = {
        "worker": worker.worker,
        "role": worker.role.value,
        "dp_rank": str(worker.dp_rank),
        "tp_rank": str(worker.tp_rank),
        "pp_rank": str(worker.pp_rank),
    }
    return tuple(values[name] for name in RANK_LABELS)


class Kind(enum.StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: its name as exposed (counters end in ``_total``), kind, unit and labels."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    group: str = "pools"  # section of the README table
    # a family every Prometheus client library exports under its standard name (client_python's
    # process collector: ``process_*``), not poolwatch's own ``poolwatch_*``
    standard: bool = False


def gauge(name: str, help_: str, labels: tuple[str, ...], unit: str = "", group: str = "pools") -> MetricSpec:
    """A gauge's spec."""
    return MetricSpec(name, Kind.GAUGE, help_, labels, unit, group)


def counter(name: str, help_: str, labels: tuple[str, ...], group: str) -> MetricSpec:
    """A counter's spec (unitless; its name ends in ``_total``)."""
    return MetricSpec(name, Kind.COUNTER, help_, labels, "", group)

"""The health of one scrape target, as the scrape loop records it and the detector judges it (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from poolwatch.errors import Reason

__all__ = ["TargetState"]


@dataclass(frozen=True, slots=True)
class TargetState:
    """What the sidecar knows about one scrape target (a probe endpoint, a /metrics URL, a log)."""

    name: str
    source: str
    up: bool = False
    worker: str = ""  # whose target it is: a crashed worker's alerts inhibit its target-down alert
    scrapes: int = 0
    last_duration: float = 0.0
    last_success_at: float | None = None
    last_error: str = ""
    errors: Counter[Reason] = field(default_factory=Counter)

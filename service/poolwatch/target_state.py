"""The health of the sidecar's inputs, as the scrape loop and the discovery scan record them and the
detector judges them (pure): one scrape target's, and the probe directory's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.errors import Reason

__all__ = ["DirectoryHealth", "TargetState"]


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


@dataclass(frozen=True, slots=True)
class DirectoryHealth:
    """What the last discovery scan found: the directory, whether the one that had probes is lost
    (``""``, ``unsafe`` or ``missing``), and what was refused (file name -> ``reason: why``; the
    directory itself under its own path)."""

    path: str
    lost: str = ""
    refused: Mapping[str, str] = field(default_factory=dict)

"""Sources of snapshots, one per target: ``probe``, ``sglang-metrics``, ``sglang-log``, ``file``.

:func:`source_provider` is what the scrape loop asks every cycle (the probe discovery directory
is re-read each time); :func:`build_sources` is one look at it.  Both come from
:class:`poolwatch.sources.targets.TargetSet`, which raises ``ConfigError`` for a bad targets file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Source
from poolwatch.sources.targets import TargetSet

__all__ = ["build_sources", "source_provider"]


def source_provider(settings: Settings, clock: Callable[[], float]) -> Callable[[], Sequence[Source]]:
    """The current sources, asked again every scrape cycle (targets come and go)."""
    return TargetSet(settings, clock).current


def build_sources(settings: Settings, clock: Callable[[], float]) -> list[Source]:
    """The sources configured now (static targets, and the probes discovered at this moment)."""
    return list(source_provider(settings, clock)())

"""The discovery directory's own health: how many files its last scan skipped, by reason, and
whether the directory the probes announced themselves in is lost.

A skipped file (a FIFO, a 50 MB file, a URL off the loopback, bad JSON...) is logged once when it
appears (:meth:`poolwatch.sources.targets.TargetSet.current`); this gauge keeps it visible for as
long as it stays, with a bounded ``reason`` (:class:`poolwatch.discovery.directory.SkipReason`)::

    poolwatch_discovery_skipped_files{reason="not_regular"} 1.0
    poolwatch_discovery_skipped_files{reason="not_loopback"} 2.0
    poolwatch_discovery_skipped_files{reason="too_large"} 0.0

Every reason is listed while discovery is on (``0`` when none), none while it is off; so is
each reason the directory can be lost for (:mod:`poolwatch.sources.probe_dir`)::

    poolwatch_discovery_directory_lost{reason="unsafe"} 1.0
    poolwatch_discovery_directory_lost{reason="missing"} 0.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from poolwatch.discovery.directory import SkipReason
from poolwatch.sidecar.metrics.families import Families, FamiliesCollector

__all__ = ["DiscoveryCollector"]

_NAMES = ("poolwatch_discovery_skipped_files", "poolwatch_discovery_directory_lost")


class DiscoveryCollector(FamiliesCollector):
    """Reads ``counts`` (e.g. :meth:`TargetSet.skipped_by_reason`) and ``lost`` (e.g.
    :meth:`TargetSet.directory_lost`) on every collect."""

    names = _NAMES

    def __init__(
        self,
        counts: Callable[[], Mapping[SkipReason, int]],
        lost: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self._counts, self._lost = counts, lost

    def fill(self, fam: Families) -> None:
        for reason, n in sorted(self._counts().items()):
            fam.add("poolwatch_discovery_skipped_files", (reason.value,), n)
        for why, flag in sorted(self._lost().items()):
            fam.add("poolwatch_discovery_directory_lost", (why,), flag)

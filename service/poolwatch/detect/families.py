"""Every alert family the detector judges, listed once, and the memo of what a snapshot judges.

:class:`Families` holds one object per family (:mod:`poolwatch.detect.family`): the sampled ones
(pool balance, forecast, probe degradation, guard repairs) judged on every snapshot, the logged
incidents, and the two timed ones; the meta-alerts (:mod:`poolwatch.detect.meta_alerts`) are judged
by Prometheus alone and have no family.

A snapshot's verdict set -- the sampled alert instances it can tell, a clean sample where no signal
names them -- depends only on its *signature*: the rank's identity labels and each sampled family's
:meth:`~poolwatch.detect.family.SampledFamily.signature` (the pools it can tell, the tripwires'
pools, whether the probe reported, the pools reported, the pools with a trend).  A healthy rank's
signature is the same snapshot after snapshot, so :class:`JudgedMemo` keeps the last signature and
its verdict set per rank-source and builds the set (and its ~14 label look-ups) again only when the
signature changes.  :meth:`Families.judged` is the plain construction the memo is compared with.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from poolwatch.detect.alert import Signal, Verdict
from poolwatch.detect.balance import PoolBalance
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import Family, SampledFamily, Seen
from poolwatch.detect.forecast import ExhaustionForecast
from poolwatch.detect.health import ProbeDegradation, Staleness, TargetHealth
from poolwatch.detect.incidents import LoggedIncidents
from poolwatch.detect.probe_directory import ProbeDirectoryHealth
from poolwatch.detect.repairs import GuardRepairs

__all__ = ["Families", "JudgedMemo"]


class Families:
    """The families of one detector, with its thresholds."""

    __slots__ = ("_signals", "_signatures", "directory", "incidents", "sampled", "stale", "targets")

    def __init__(self, config: DetectorConfig) -> None:
        self.sampled: tuple[SampledFamily, ...] = (
            PoolBalance(config),
            ExhaustionForecast(config),
            ProbeDegradation(config),
            GuardRepairs(),
        )
        self.incidents = LoggedIncidents(config)
        self.stale = Staleness(config)
        self.targets = TargetHealth(config)
        self.directory = ProbeDirectoryHealth(config)
        # bound once: they are called for every snapshot
        self._signals = tuple(family.signals for family in self.sampled)
        self._signatures = tuple(family.signature for family in self.sampled)

    def every(self) -> tuple[Family, ...]:
        return (*self.sampled, self.incidents, self.stale, self.targets, self.directory)

    def signals(self, seen: Seen) -> list[Signal]:
        """Every sampled family's signals of ``seen``, in the order the families are listed."""
        return [sig for signals in self._signals for sig in signals(seen)]

    def signature(self, seen: Seen) -> list[object]:
        """What ``seen``'s verdict set depends on: the rank's identity and each sampled family's part."""
        w = seen.snap.worker
        return [w.worker, w.role, w.dp_rank, w.tp_rank, w.pp_rank, *[part(seen) for part in self._signatures]]

    def judged(self, seen: Seen) -> set[Verdict]:
        """Every verdict ``seen`` gives, built from scratch."""
        return set().union(*(family.judged(seen) for family in self.sampled))


@dataclass(slots=True)
class JudgedMemo:
    """The last signature of one rank-source and the verdict set it gives."""

    signature: object = None  # compared, never hashed
    judged: frozenset[Verdict] = frozenset()

    def judged_by(self, seen: Seen, families: Families) -> Set[Verdict]:
        """``seen``'s verdict set, rebuilt only on a new signature."""
        signature = families.signature(seen)
        if signature != self.signature:
            self.signature, self.judged = signature, frozenset(families.judged(seen))
        return self.judged

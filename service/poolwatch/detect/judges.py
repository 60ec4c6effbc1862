"""The judges of one detector, one per family of :data:`poolwatch.detect.rules.FAMILIES`, grouped by
mode, and the memo of what a snapshot judges.

:class:`Judges` builds each family's judge with the detector's thresholds: the sampled ones judged
on every snapshot, the event ones on the log lines a snapshot carries, the timed ones on the timer;
a family of Prometheus-only alerts (the meta family) has none.

A snapshot's verdict set -- the sampled alert instances it can tell, a clean sample where no signal
names them -- depends only on its *signature*: the rank's identity labels and each sampled judge's
:meth:`~poolwatch.detect.family.SampledJudge.signature` (the pools it can tell, the tripwires'
pools, whether the probe reported, the pools reported, the pools with a trend).  A healthy rank's
signature is the same snapshot after snapshot, so :class:`JudgedMemo` keeps the last signature and
its verdict set per rank-source and builds the set (and its ~14 label look-ups) again only when the
signature changes.  :meth:`Judges.judged` is the plain construction the memo is compared with.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from poolwatch.detect.alert import Signal, Verdict
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import EventJudge, Family, SampledJudge, Seen, Tick, TimedJudge
from poolwatch.detect.rules import FAMILIES
from poolwatch.model.snapshot import Snapshot

__all__ = ["JudgedMemo", "Judges"]


class Judges:
    """The judges of one detector, with its thresholds."""

    __slots__ = ("_signals", "_signatures", "events", "sampled", "timed")

    def __init__(self, config: DetectorConfig, families: tuple[Family, ...] = FAMILIES) -> None:
        sampled: list[SampledJudge] = []
        events: list[EventJudge] = []
        timed: list[tuple[tuple[str, ...], TimedJudge]] = []
        for family in families:
            if family.sampled is not None:
                sampled.append(family.sampled(config))
            if family.event is not None:
                events.append(family.event(config))
            if family.timed is not None:
                timed.append((family.names, family.timed(config)))
        self.sampled = tuple(sampled)
        self.events = tuple(events)
        self.timed = tuple(timed)  # each with the alerts its verdict covers
        # bound once: they are called for every snapshot
        self._signals = tuple(judge.signals for judge in self.sampled)
        self._signatures = tuple(judge.signature for judge in self.sampled)

    def signals(self, seen: Seen) -> list[Signal]:
        """Every sampled judge's signals of ``seen``, in the order the families are listed."""
        return [sig for signals in self._signals for sig in signals(seen)]

    def signature(self, seen: Seen) -> list[object]:
        """What ``seen``'s verdict set depends on: the rank's identity and each sampled judge's part."""
        w = seen.snap.worker
        return [w.worker, w.role, w.dp_rank, w.tp_rank, w.pp_rank, *[part(seen) for part in self._signatures]]

    def judged(self, seen: Seen) -> set[Verdict]:
        """Every verdict ``seen`` gives, built from scratch."""
        return set().union(*(judge.judged(seen) for judge in self.sampled))

    def events_of(self, snap: Snapshot, now: float) -> list[Signal]:
        """The signals the log lines ``snap`` carries raise."""
        return [sig for judge in self.events for sig in judge.signals(snap, now)]

    def ticked(self, tick: Tick) -> list[tuple[tuple[str, ...], list[Signal]]]:
        """Each timed judge that could judge this turn: the alerts it covers and its signals."""
        out = []
        for names, judge in self.timed:
            signals = judge.signals(tick)
            if signals is not None:
                out.append((names, signals))
        return out


@dataclass(slots=True)
class JudgedMemo:
    """The last signature of one rank-source and the verdict set it gives."""

    signature: object = None  # compared, never hashed
    judged: frozenset[Verdict] = frozenset()

    def judged_by(self, seen: Seen, judges: Judges) -> Set[Verdict]:
        """``seen``'s verdict set, rebuilt only on a new signature."""
        signature = judges.signature(seen)
        if signature != self.signature:
            self.signature, self.judged = signature, frozenset(judges.judged(seen))
        return self.judged

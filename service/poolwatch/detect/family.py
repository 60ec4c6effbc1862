"""What an alert family is: the alerts it raises, its signals and -- for a sampled family -- its
verdicts, in one object.  Pure.

A family judges one or more alerts of one :class:`~poolwatch.detect.schema.Mode` from one kind of
input.  A :class:`SampledFamily` judges every snapshot of a rank-source as the detector
:class:`Seen` it: its :meth:`~SampledFamily.signals` are bad samples, and its
:meth:`~SampledFamily.judged` verdicts say which of its alert instances the snapshot can tell at
all (for those, no signal is a clean sample; the others are left be).  Which verdicts those are
depends only on the snapshot's :meth:`~SampledFamily.signature`, so the detector rebuilds them only
when the signature changes (:mod:`poolwatch.detect.families`).  Event and timed families
(:mod:`.incidents`, :mod:`.health`) have only signals: an event fires at once, and a timed family's
verdict is every instance of its alerts.

The sentences every family writes about a rank (:func:`where`, :func:`first_line`) are here too.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import NamedTuple, Protocol

from poolwatch.conservation import Finding
from poolwatch.detect.alert import Signal, Verdict
from poolwatch.detect.schema import AlertName, Mode
from poolwatch.detect.trend import Trend
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["Family", "SampledFamily", "Seen", "crash_imminent", "first_line", "where"]


class Seen(NamedTuple):
    """One snapshot as the detector sees it on arrival, with what its rank-source's history adds
    (a named tuple: one is built for every snapshot)."""

    snap: Snapshot
    findings: Mapping[Pool, Finding]  # :func:`poolwatch.conservation.findings` of ``snap``
    fits: tuple[tuple[Pool, Trend], ...] = ()  # the pools with a fitted trend, in pool order
    errors_before: int | None = None  # the probe's error count at the start of its window (same boot)


class Family(Protocol):
    """Every family: the alerts it raises, all of one mode."""

    @property
    def alerts(self) -> tuple[AlertName, ...]: ...

    @property
    def mode(self) -> Mode: ...


class SampledFamily(Family, Protocol):
    """A family judged on every snapshot of a rank-source."""

    def signals(self, seen: Seen) -> list[Signal]:
        """The bad samples ``seen`` shows (at most one per alert instance)."""
        ...

    def signature(self, seen: Seen) -> Hashable:
        """What :meth:`judged` depends on besides the rank's identity (cheap: every snapshot)."""
        ...

    def judged(self, seen: Seen) -> set[Verdict]:
        """The alert instances ``seen`` can tell: for those, no signal is a clean sample."""
        ...


def where(snap: Snapshot) -> str:
    w = snap.worker
    return f"{w.worker} ({w.role.value}, dp {w.dp_rank} tp {w.tp_rank} pp {w.pp_rank})"


def crash_imminent(snap: Snapshot) -> bool:
    """SGLang's idle check raises on an imbalance unless it was relaxed (unknown = the default)."""
    return snap.idle_check_strict is not False


def first_line(message: str, limit: int = 300) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."

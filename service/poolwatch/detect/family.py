"""What a detector family is: one module of :mod:`poolwatch.detect.families` declaring, in one
:class:`Family` value named ``FAMILY``, its alerts (PromQL, severity, text, runbook), the catalogue
metrics its rules read, and the judge the sidecar's detector runs for it.  Pure.

A family's alerts are all of one :class:`~poolwatch.detect.schema.Mode`, and its judge is of that
mode:

* a :class:`SampledJudge` judges every snapshot of a rank-source as the detector :class:`Seen` it:
  its :meth:`~SampledJudge.signals` are bad samples, and its :meth:`~SampledJudge.judged` verdicts
  say which of its alert instances the snapshot can tell at all (for those, no signal is a clean
  sample; the others are left be).  Which verdicts those are depends only on the snapshot's
  :meth:`~SampledJudge.signature`, so the detector rebuilds them only when the signature changes
  (:mod:`poolwatch.detect.judges`);
* an :class:`EventJudge` reads the log lines a snapshot carries: an event fires at once;
* a :class:`TimedJudge` is asked on the evaluation timer (:class:`Tick`), and its verdict is every
  instance of its alerts;
* a family of :attr:`~poolwatch.detect.schema.Mode.PROMETHEUS` alerts has no judge: only
  Prometheus can tell (the sidecar watching itself).

What every family repeats is here too, for a new family to use rather than write again: its
judge subclasses :class:`Judge` (the thresholds it is built with); a rule the detector holds like its
own alert is :func:`held` (its ``keep_firing_for`` is the tracker's ``resolve_hold``); the verdicts
a sampled judge gives per pool are :func:`pool_verdicts`; the sentences every family writes about a
rank are :func:`where` and :func:`first_line`.  A judge of what a probe snapshot names per pool
subclasses :class:`poolwatch.detect.pool_judge.PoolJudge`.  What an engine will do next with a
finding is :mod:`poolwatch.detect.outcome`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from poolwatch.catalog.metrics import by_name
from poolwatch.catalog.spec import MetricSpec
from poolwatch.conservation import Finding
from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels
from poolwatch.detect.charts import Chart
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Severity
from poolwatch.detect.thresholds import Thresholds
from poolwatch.detect.trend import Trend
from poolwatch.model.rank import Pool, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.target_state import DirectoryHealth, TargetState

__all__ = [
    "EventJudge",
    "Family",
    "Judge",
    "SampledJudge",
    "Seen",
    "Tick",
    "TimedJudge",
    "first_line",
    "held",
    "pool_verdicts",
    "uses",
    "where",
]


class Seen(NamedTuple):
    """One snapshot as the detector sees it on arrival, with what its rank-source's history adds
    (a named tuple: one is built for every snapshot)."""

    snap: Snapshot
    findings: Mapping[Pool, Finding]  # :func:`poolwatch.conservation.findings` of ``snap``
    fits: tuple[tuple[Pool, Trend], ...] = ()  # the pools with a fitted trend, in pool order
    errors_before: int | None = None  # the probe's error count at the start of its window (same boot)


class Tick(NamedTuple):
    """One turn of the evaluation timer: what the caller passed (``None``: not this turn)."""

    now: float
    latest: Sequence[Snapshot] | None = None  # the latest snapshot of every rank
    targets: Sequence[TargetState] | None = None  # every scrape target's health
    directory: DirectoryHealth | None = None  # what the discovery scan found of the probe directory


class SampledJudge(Protocol):
    """A sampled family's judge: every snapshot of a rank-source."""

    def signals(self, seen: Seen) -> list[Signal]:
        """The bad samples ``seen`` shows (at most one per alert instance)."""
        ...

    def signature(self, seen: Seen) -> Hashable:
        """What :meth:`judged` depends on besides the rank's identity (cheap: every snapshot)."""
        ...

    def judged(self, seen: Seen) -> set[Verdict]:
        """The alert instances ``seen`` can tell: for those, no signal is a clean sample."""
        ...


class EventJudge(Protocol):
    """An event family's judge: the log lines a snapshot carries."""

    def signals(self, snap: Snapshot, now: float) -> list[Signal]:
        """The alerts the lines in ``snap`` raise (one per alert and rank; old lines skipped)."""
        ...


class TimedJudge(Protocol):
    """A timed family's judge: every instance of its alerts, on the timer."""

    def signals(self, tick: Tick) -> list[Signal] | None:
        """The instances in trouble now; ``None`` when this turn brings nothing it reads."""
        ...


@dataclass(frozen=True, slots=True)
class Judge:
    """What every family's judge is built with: the detector's thresholds (the family's factory is
    the judge's class, ``Family(sampled=MyJudge)``).  A judge subclasses it with its mode's methods;
    one without fields of its own needs no ``@dataclass``."""

    config: DetectorConfig = field(default_factory=DetectorConfig)


def pool_verdicts(worker: WorkerId, pools: Iterable[Pool], *alerts: str) -> set[Verdict]:
    """The verdicts on ``alerts`` of each of ``pools`` of a rank (a sampled judge's ``judged``)."""
    return {(alert, rank_labels(worker, pool.value)) for pool in pools for alert in alerts}


def held(
    severity: Severity, expr: str, description: str, config: DetectorConfig, for_s: float = 0.0
) -> PromRule:
    """A rule of an alert the detector judges on samples or the timer: it waits ``for_s`` seconds
    and, like the detector's tracker, keeps firing ``resolve_hold`` seconds after its condition
    last held, so a flickering condition neither resolves nor re-fires on either path."""
    wait = q.duration(for_s) if for_s > 0 else "0s"  # at once, as the rules have always said it
    return PromRule(severity, expr, wait, description, keep_firing_for=q.duration(config.resolve_hold))


def uses(*names: str) -> tuple[MetricSpec, ...]:
    """The catalogue entries named (a name that is not catalogued fails at import)."""
    return tuple(by_name(name) for name in names)


@dataclass(frozen=True, slots=True)
class Family:
    """One detector family, as the detector, the rules generator, the runbook index, the README
    and the dashboards see it (each iterates :data:`poolwatch.detect.rules.FAMILIES`).

    ``name``     its module's name in :mod:`poolwatch.detect.families`;
    ``title``    how the docs and the dashboards name it ("Pool balance");
    ``about``    one sentence: what it watches;
    ``metrics``  the catalogue entries its rules read (:func:`uses`; a test holds them to the rules);
    ``alerts``   its alert definitions, thresholds and waits from a config;
    ``sampled`` / ``event`` / ``timed``  the judge's factory for its mode (none: Prometheus alone);
    ``thresholds``  the class of its own thresholds (:mod:`poolwatch.detect.thresholds`): settings,
                 ``--help`` and the detector's config read them from it (none: it uses only the shared ones);
    ``charts``   its figures on the worker dashboard (:mod:`poolwatch.detect.charts`).
    """

    name: str
    title: str
    about: str
    metrics: tuple[MetricSpec, ...]
    alerts: Callable[[MixinConfig], tuple[AlertDef, ...]]
    sampled: Callable[[DetectorConfig], SampledJudge] | None = None
    event: Callable[[DetectorConfig], EventJudge] | None = None
    timed: Callable[[DetectorConfig], TimedJudge] | None = None
    thresholds: type[Thresholds] | None = None
    charts: tuple[Chart, ...] = ()

    def __post_init__(self) -> None:
        for chart in self.charts:
            for line in chart.lines:
                by_name(line.metric)  # a chart reads the catalogue only (KeyError names the stranger)
        modes = {a.mode for a in self.alerts(MixinConfig())}
        if len(modes) != 1:
            raise ValueError(f"family {self.name}: its alerts are of {len(modes)} modes, not one")
        judges = {Mode.SAMPLED: self.sampled, Mode.EVENT: self.event, Mode.TIMED: self.timed}
        given = {mode for mode, factory in judges.items() if factory is not None}
        wanted = modes - {Mode.PROMETHEUS}
        if given != wanted:
            raise ValueError(
                f"family {self.name}: alerts of mode {modes.pop()} need a judge of that mode only"
            )

    @property
    def mode(self) -> Mode:
        return self.alerts(MixinConfig())[0].mode

    @property
    def names(self) -> tuple[str, ...]:
        """Its alerts' names, in definition order."""
        return tuple(a.name for a in self.alerts(MixinConfig()))


def where(snap: Snapshot) -> str:
    w = snap.worker
    return f"{w.worker} ({w.role.value}, dp {w.dp_rank} tp {w.tp_rank} pp {w.pp_rank})"


def first_line(message: str, limit: int = 300) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."

"""What an engine's own sources room offers the sidecar: one spec object per engine.

Without a probe, the sidecar reads an engine from the outside: its ``/metrics`` page (coarse
figures) and its log (incidents, crashes, figures when it prints them).  What differs between
engines -- the metric names, the log's dialect, what a crash looks like -- lives in the engine's
room (``poolwatch/sources/<engine>/``), which hands the sidecar one :class:`EngineSources`: a
:class:`~poolwatch.sources.logfile.dialect.LogDialect` and, optionally, a ``/metrics`` reader.
The log source and the replayer are built here from the dialect: the whole log pipeline is
engine-neutral (:mod:`poolwatch.sources.logfile`).  Neutral code (the targets, ``poolwatch check``,
``poolwatch replay``) asks for the room by engine name or by source kind (:func:`sources_of`,
:func:`sources_for`) and never branches on an engine's name; the rooms are found through
:mod:`poolwatch.engines`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from poolwatch.engines import ENGINES, EngineEntry, UnknownEngine, engine_entry, load
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import SourceKind
from poolwatch.sources.base import Source, Target
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.evidence import Evidence, sniff, weigh
from poolwatch.sources.logfile.replay import ReplayReport, Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.logfile.source import LogSource

__all__ = [
    "EngineSources",
    "LogReplayer",
    "MetricsSourceType",
    "SourceOptions",
    "engine_sources",
    "sniff_engine",
    "source_kinds",
    "sources_for",
    "sources_of",
    "weigh_engines",
]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What every source is built with (the sidecar's scrape and memory bounds)."""

    max_bytes: int = 4 << 20
    limits: Limits = field(default_factory=lambda: DEFAULT_LIMITS)


class LogReplayer(Protocol):
    """Replays a saved log: fed lines in order, it emits timeline rows and fills a report."""

    report: ReplayReport

    def feed(self, lines: Iterable[str]) -> None: ...

    def finish(self) -> ReplayReport: ...


class MetricsSourceType(Protocol):
    """How a room's ``/metrics`` source is built (its class)."""

    def __call__(self, target: Target, clock: Clock, *, max_bytes: int, limits: Limits) -> Source: ...


@dataclass(frozen=True, slots=True)
class EngineSources:
    """One engine's sources: what kinds of target it reads and how.  Its kinds are named after the
    engine (``<engine>-metrics``, ``<engine>-log``); which it reads is also its registry entry's
    ``channels`` (``tests/test_engines.py`` holds the two equal)."""

    engine: str  # the registry's name (poolwatch.engines)
    log_dialect: LogDialect  # how its log reads (the log source and the replayer are built from it)
    metrics_source: MetricsSourceType | None = None  # reads its ``/metrics`` page (None: a log only)
    # how long its /metrics must be watched to prove a rank idle (None: never)
    idle_confirm_s: float | None = None

    def __post_init__(self) -> None:
        if self.log_dialect.engine != self.engine:
            raise ValueError(f"engine {self.engine!r}: its log dialect is {self.log_dialect.engine!r}'s")

    @property
    def metrics(self) -> SourceKind:
        """The kind of a target that is its ``/metrics`` page."""
        return SourceKind.of(self.engine, "metrics")

    @property
    def log(self) -> SourceKind:
        """The kind of a target that is its log file."""
        return SourceKind.of(self.engine, "log")

    @property
    def kinds(self) -> tuple[SourceKind, ...]:
        """The kinds it reads (its log's; its ``/metrics``' first when it has one)."""
        return (self.metrics, self.log) if self.metrics_source is not None else (self.log,)

    def make(self, target: Target, clock: Clock, options: SourceOptions) -> Source:
        """The source that reads ``target`` (one of this engine's kinds)."""
        if target.source == self.log:
            return LogSource(target, clock, self.log_dialect, max_ranks=options.limits.max_log_ranks)
        if target.source != self.metrics or self.metrics_source is None:
            raise UnknownEngine(f"{target.source}: not a kind of target {self.engine}'s sources read")
        return self.metrics_source(target, clock, max_bytes=options.max_bytes, limits=options.limits)

    def replayer(
        self, worker: str, emit: Callable[[Row], None], every: float, day: dt.date | None = None
    ) -> LogReplayer:
        """A replayer of a saved log of this engine (``poolwatch replay``)."""
        return Replayer(self.log_dialect, worker, emit, every, day)


def _rooms(entries: tuple[EngineEntry, ...]) -> list[EngineSources]:
    return [load(e.sources) for e in entries if e.sources]


def sources_of(engine: str, entries: tuple[EngineEntry, ...] = ENGINES) -> EngineSources:
    """The sources room of ``engine``; :class:`~poolwatch.engines.UnknownEngine` when there is no
    such engine or it has no sources room."""
    entry = engine_entry(engine, entries)
    if not entry.sources:
        raise UnknownEngine(f"engine {engine!r} has no /metrics or log source")
    room: EngineSources = load(entry.sources)
    return room


def sources_for(kind: SourceKind, entries: tuple[EngineEntry, ...] = ENGINES) -> EngineSources | None:
    """The room whose ``/metrics`` or log kind ``kind`` is (None: a neutral kind, probe or file)."""
    return next((r for r in _rooms(entries) if kind in r.kinds), None)


def source_kinds(entries: tuple[EngineEntry, ...] = ENGINES) -> tuple[SourceKind, ...]:
    """Every kind of target: ``probe``, the engines' own kinds as the registry lists them, ``file``
    (no room is loaded)."""
    engines = (SourceKind(kind) for entry in entries for kind in entry.source_kinds)
    return (SourceKind.PROBE, *engines, SourceKind.FILE)


def engine_sources(entries: tuple[EngineEntry, ...] = ENGINES) -> list[EngineSources]:
    """Every engine's sources room."""
    return _rooms(entries)


def sniff_engine(
    lines: Iterable[str], entries: tuple[EngineEntry, ...] = ENGINES
) -> tuple[EngineSources, Evidence] | None:
    """The engine whose own marks the most of ``lines`` carry, and the evidence (None when no
    line carries any engine's; on a tie, the first in the registry)."""
    rooms = _rooms(entries)
    evidence = sniff(lines, [r.log_dialect for r in rooms])
    if evidence is None:
        return None
    return next(r for r in rooms if r.engine == evidence.engine), evidence


def weigh_engines(
    lines: Iterable[str], entries: tuple[EngineEntry, ...] = ENGINES
) -> list[tuple[EngineSources, Evidence]]:
    """Every engine's evidence over ``lines`` (its own marks, counted), in the registry's order."""
    rooms = _rooms(entries)
    return list(zip(rooms, weigh(lines, [r.log_dialect for r in rooms]), strict=True))

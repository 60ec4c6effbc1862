"""What an engine's own sources room offers the sidecar: one spec object per engine.

Without a probe, the sidecar reads an engine from the outside: its ``/metrics`` page (coarse
figures) and its log (incidents, crashes, figures when it prints them).  What differs between
engines -- the metric names, the log's dialect, what a crash looks like -- lives in the engine's
room (``poolwatch/sources/<engine>/``), which hands the sidecar one :class:`EngineSources`: a
``/metrics`` reader and a :class:`~poolwatch.sources.logfile.dialect.LogDialect`, either optional
(an engine may have only one).  The log source and the replayer are built here from the dialect:
the whole log pipeline is engine-neutral (:mod:`poolwatch.sources.logfile`).  Neutral code (the
targets, ``poolwatch check``, ``poolwatch replay``) asks for the room by engine name or by source
kind (:func:`sources_of`, :func:`sources_for`) and never branches on an engine's name; the rooms
are found through :mod:`poolwatch.engines`.
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
    "SourceOptions",
    "engine_sources",
    "sniff_engine",
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


@dataclass(frozen=True, slots=True)
class EngineSources:
    """One engine's sources: what kinds of target it reads and how."""

    engine: str  # the registry's name (poolwatch.engines)
    metrics: SourceKind | None = None  # the kind of a target that is its ``/metrics`` page (None: none)
    metrics_source: Callable[[Target, Clock, SourceOptions], Source] | None = None
    log_dialect: LogDialect | None = None  # how its log reads (None: no log worth reading)
    idle_confirm_s: float | None = (
        None  # how long its /metrics must be watched to prove a rank idle (None: never)
    )

    @property
    def log(self) -> SourceKind | None:
        """The kind of a target that is its log file (None: none)."""
        return None if self.log_dialect is None else self.log_dialect.source

    def make(self, target: Target, clock: Clock, options: SourceOptions) -> Source:
        """The source that reads ``target`` (one of this engine's kinds)."""
        if target.source is self.metrics and self.metrics_source is not None:
            return self.metrics_source(target, clock, options)
        if self.log_dialect is None or target.source is not self.log_dialect.source:
            raise UnknownEngine(f"engine {self.engine!r} reads no {target.source} target")
        return LogSource(target, clock, self.log_dialect, max_ranks=options.limits.max_log_ranks)

    def replayer(
        self, worker: str, emit: Callable[[Row], None], every: float, day: dt.date | None
    ) -> LogReplayer:
        """A replayer of a saved log of this engine (``poolwatch replay``)."""
        if self.log_dialect is None:
            raise UnknownEngine(f"engine {self.engine!r} has no log to replay")
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
    return next((r for r in _rooms(entries) if kind is r.metrics or kind is r.log), None)


def engine_sources(entries: tuple[EngineEntry, ...] = ENGINES) -> list[EngineSources]:
    """Every engine's sources room."""
    return _rooms(entries)


def sniff_engine(
    lines: Iterable[str], entries: tuple[EngineEntry, ...] = ENGINES
) -> tuple[EngineSources, Evidence] | None:
    """The engine whose own marks the most of ``lines`` carry, and the evidence (None when no
    line carries any engine's; on a tie, the first in the registry)."""
    rooms = [r for r in _rooms(entries) if r.log_dialect is not None]
    evidence = sniff(lines, [r.log_dialect for r in rooms if r.log_dialect is not None])
    if evidence is None:
        return None
    return next(r for r in rooms if r.engine == evidence.engine), evidence


def weigh_engines(
    lines: Iterable[str], entries: tuple[EngineEntry, ...] = ENGINES
) -> list[tuple[EngineSources, Evidence]]:
    """Every engine's evidence over ``lines`` (its own marks, counted), in the registry's order."""
    rooms = [r for r in _rooms(entries) if r.log_dialect is not None]
    dialects = [r.log_dialect for r in rooms if r.log_dialect is not None]
    return list(zip(rooms, weigh(lines, dialects), strict=True))

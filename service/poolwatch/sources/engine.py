"""What an engine's own sources room offers the sidecar: one spec object per engine.

Without a probe, the sidecar reads an engine from the outside: its ``/metrics`` page (coarse
figures) and its log (incidents, crashes, figures when it prints them).  What differs between
engines -- the metric names, the log formats, what a crash looks like -- lives in the engine's
room (``poolwatch/sources/<engine>/``), which hands the sidecar one :class:`EngineSources`.
Neutral code (the targets, ``poolwatch check``, ``poolwatch replay``) asks for the room by
engine name or by source kind (:func:`sources_of`, :func:`sources_for`) and never branches on an
engine's name; the rooms are found through :mod:`poolwatch.engines`.
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
from poolwatch.sources.logfile.replay import ReplayReport, Row

__all__ = [
    "EngineSources",
    "LogReplayer",
    "SourceOptions",
    "LogSourceType",
    "MetricsSourceType",
    "ReplayerType",
    "engine_sources",
    "sniff_engine",
    "source_kinds",
    "sources_for",
    "sources_of",
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


class LogSourceType(Protocol):
    """How a room's log source is built (its class)."""

    def __call__(self, target: Target, clock: Clock, *, max_ranks: int) -> Source: ...


class ReplayerType(Protocol):
    """How a room's replayer of a saved log is built (``poolwatch replay``)."""

    def __call__(
        self, worker: str, emit: Callable[[Row], None], every: float, day: dt.date | None = None
    ) -> LogReplayer: ...


@dataclass(frozen=True, slots=True)
class EngineSources:
    """One engine's sources: what kinds of target it reads and how.  Its kinds are named after the
    engine (``<engine>-metrics``, ``<engine>-log``); which it reads is also its registry entry's
    ``channels`` (``tests/test_engines.py`` holds the two equal)."""

    engine: str  # the registry's name (poolwatch.engines)
    log_source: LogSourceType  # reads its log file
    replayer: ReplayerType  # replays a saved log (``poolwatch replay``)
    recognises: Callable[[str], bool]  # whether a raw log line is in one of the engine's formats
    metrics_source: MetricsSourceType | None = None  # reads its ``/metrics`` page (None: a log only)
    # how long its /metrics must be watched to prove a rank idle (None: never)
    idle_confirm_s: float | None = None

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
            return self.log_source(target, clock, max_ranks=options.limits.max_log_ranks)
        if target.source != self.metrics or self.metrics_source is None:
            raise UnknownEngine(f"{target.source}: not a kind of target {self.engine}'s sources read")
        return self.metrics_source(target, clock, max_bytes=options.max_bytes, limits=options.limits)


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


def sniff_engine(lines: Iterable[str], entries: tuple[EngineEntry, ...] = ENGINES) -> EngineSources | None:
    """The engine whose formats the most of ``lines`` are in (None when no line is any engine's;
    on a tie, the first in the registry)."""
    rooms = _rooms(entries)
    counts = [0] * len(rooms)
    for line in lines:
        for i, room in enumerate(rooms):
            counts[i] += room.recognises(line)
    best = max(range(len(rooms)), key=lambda i: (counts[i], -i), default=None)
    return None if best is None or counts[best] == 0 else rooms[best]

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
    "engine_sources",
    "sniff_engine",
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


@dataclass(frozen=True, slots=True)
class EngineSources:
    """One engine's sources: what kinds of target it reads and how."""

    engine: str  # the registry's name (poolwatch.engines)
    metrics: SourceKind  # the kind of a target that is its ``/metrics`` page
    log: SourceKind  # the kind of a target that is its log file
    metrics_source: Callable[[Target, Clock, SourceOptions], Source]
    log_source: Callable[[Target, Clock, SourceOptions], Source]
    # (worker, emit, every, day) -> a replayer of a saved log (``poolwatch replay``)
    replayer: Callable[[str, Callable[[Row], None], float, dt.date | None], LogReplayer]
    recognises: Callable[[str], bool]  # whether a raw log line is in one of the engine's formats
    idle_confirm_s: float | None  # how long its /metrics must be watched to prove a rank idle (None: never)

    def make(self, target: Target, clock: Clock, options: SourceOptions) -> Source:
        """The source that reads ``target`` (one of this engine's kinds)."""
        factory = self.metrics_source if target.source is self.metrics else self.log_source
        return factory(target, clock, options)


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
    return next((r for r in _rooms(entries) if kind in (r.metrics, r.log)), None)


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

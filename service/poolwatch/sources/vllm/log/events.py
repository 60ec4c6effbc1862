"""What a vLLM log record says: statistics, an engine's start, its crash, its death seen by the API
server.  Pure.

* ``Engine 000: ... Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, ...`` (the API
  server, per engine) -> :class:`Stats`;
* ``Initializing a V1 LLM engine (v0.32.0) with config: ...`` (EngineCore, first line) ->
  :class:`Startup`, a new boot of that engine; ``GPU KV cache size: 1,048,576 tokens`` ->
  :class:`Capacity`;
* ``EngineCore encountered a fatal error.`` / ``EngineCore failed to start.`` with the traceback,
  and ``[FT] Busy loop raised AssertionError. Waiting for recovery.`` (0.27+ fault tolerance) ->
  :class:`RankIncident`, a ``scheduler_exception`` incident: the same PoolwatchSchedulerCrashed as
  SGLang's ``Scheduler hit an exception``;
* the API server's ``EngineCoreDeadError``/``EngineCore encountered an issue``, ``Engine core proc
  EngineCore_DP0 died unexpectedly`` (to 0.19), ``[shutdown] MPClient: engine core exited
  unexpectedly`` (0.23+), ``Request ... failed (engine dead).`` -> :class:`EngineDead` (an incident
  only when EngineCore's own line did not already say so: a killed EngineCore logs nothing);
* ``[FT] Engine 0 status -> UNHEALTHY``, ``[FT] No recovery within 60s timeout.`` -> :class:`FtStatus`.

The rank is the EngineCore's data-parallel index: its process tag (``EngineCore_DP1``), the
statistics line's ``Engine 001``, the fault-tolerance line's ``Engine 1``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from poolwatch.model.rank import IncidentKind
from poolwatch.model.snapshot import Incident
from poolwatch.sources.vllm.log.crash import MAX_TEXT, crash_text, read_crash
from poolwatch.sources.vllm.log.formats import (
    CAPACITY,
    CLIENT_DEAD,
    FATAL,
    FT_BUSY_LOOP,
    FT_NO_RECOVERY,
    FT_STATUS,
    STARTUP,
)
from poolwatch.sources.vllm.log.lines import Calendar, clean, parse_line, rank_of
from poolwatch.sources.vllm.log.records import LogRecord
from poolwatch.sources.vllm.log.stats import StatsFigures, parse_stats_line

__all__ = [
    "Capacity",
    "EngineDead",
    "FtStatus",
    "LogEvent",
    "RankIncident",
    "Startup",
    "Stats",
    "interpret",
    "recognises",
]

_CRASH = IncidentKind.SCHEDULER_EXCEPTION
_ANY_DAY = dt.date(2000, 12, 31)  # a leap year: every MM-DD stamp is a date (recognising needs no year)


@dataclass(frozen=True, slots=True)
class Stats:
    at: float
    dp: int | None  # None: the "N Engines Aggregated" line, no one engine's
    figures: StatsFigures


@dataclass(frozen=True, slots=True)
class Startup:
    at: float
    dp: int
    release: str


@dataclass(frozen=True, slots=True)
class Capacity:
    at: float
    dp: int
    tokens: int  # the KV cache's capacity in tokens, as EngineCore computed it at start


@dataclass(frozen=True, slots=True)
class RankIncident:
    dp: int
    incident: Incident
    in_pool: bool = False  # raised in vLLM's block bookkeeping: its own check caught the pool


@dataclass(frozen=True, slots=True)
class EngineDead:
    at: float
    dp: int | None  # None: the line does not say which engine
    message: str


@dataclass(frozen=True, slots=True)
class FtStatus:
    at: float
    dp: int
    status: str  # "unhealthy", "healthy", "dead", "diagnosing", "no-recovery"


LogEvent = Stats | Startup | Capacity | RankIncident | EngineDead | FtStatus


def interpret(record: LogRecord) -> list[LogEvent]:
    """The events of one record (most records are none of these and give ``[]``)."""
    message = record.message
    stats = parse_stats_line(message)
    if stats is not None:
        return [Stats(record.at, stats.engine, stats)]
    dp = rank_of(record.process) or 0
    event = _engine_event(record, message, dp)
    if event is not None:
        return [event]
    dead = _client_dead(record)
    return [] if dead is None else [dead]


def _engine_event(record: LogRecord, message: str, dp: int) -> LogEvent | None:
    if (m := STARTUP.search(message)) is not None:
        return Startup(record.at, dp, m["release"])
    if (m := CAPACITY.search(message)) is not None:
        return Capacity(record.at, dp, int(m["tokens"].replace(",", "")))
    if any(marker in message for marker, _ in FATAL):
        crash = read_crash(record.lines)
        incident = Incident(_CRASH, crash_text(record.lines), record.at)
        return RankIncident(dp, incident, crash.in_pool)
    return _ft_event(record, message, dp) if "[FT] " in message else None


def _ft_event(record: LogRecord, message: str, dp: int) -> LogEvent | None:
    if FT_BUSY_LOOP.search(message) is not None:
        return RankIncident(dp, Incident(_CRASH, message[:MAX_TEXT], record.at))
    if (m := FT_STATUS.search(message)) is not None:
        return FtStatus(record.at, int(m["engine"]), m["status"].lower())
    if FT_NO_RECOVERY.search(message) is not None:
        return FtStatus(record.at, dp, "no-recovery")
    return None


def _client_dead(record: LogRecord) -> EngineDead | None:
    for line in record.lines:
        for pattern, _ in CLIENT_DEAD:
            m = pattern.search(line)
            if m is not None:
                named = m.groupdict().get("process")
                text = line if line is record.message else f"{record.message}\n{line}"
                return EngineDead(record.at, rank_of(named) if named else None, text[:MAX_TEXT])
    return None


def recognises(line: str) -> bool:
    """Whether one raw line is in a format vLLM writes and poolwatch reads (``poolwatch replay``
    tells engines' logs apart by this)."""
    head = parse_line(line, Calendar(_ANY_DAY))
    text = head.message if head is not None else clean(line)
    if head is not None and (parse_stats_line(text) or STARTUP.search(text) or CAPACITY.search(text)):
        return True
    if any(marker in text for marker, _ in FATAL) or FT_BUSY_LOOP.search(text):
        return True
    return any(pattern.search(text) for pattern, _ in CLIENT_DEAD)

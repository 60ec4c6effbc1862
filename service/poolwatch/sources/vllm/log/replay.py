"""Replay a saved vLLM log: each engine's statistics over time, its starts, crashes and the first
provable fault.

The log source's parsers run over the lines in order, in constant memory: statistics lines are
summarised per engine over windows of ``every`` seconds (``every=0`` keeps every line; the pool
column shows the window's worst KV cache usage, a negative one first), and each start, crash and
fault-tolerance status gets its own row.  The *first problem* is the earliest moment the block
accounting provably went wrong: a usage printed below zero, or EngineCore dying of an exception
raised in vLLM's own block bookkeeping (``assert block.ref_cnt == 0`` in ``get_new_blocks``, the
free queue's ``remove() called on an invalid block``).  Any crash makes the replay exit 1.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from poolwatch.conservation import assess_snapshot, describe
from poolwatch.model.rank import Pool
from poolwatch.sources.logfile.replay import Problem, ReplayReport, Row, Windows
from poolwatch.sources.vllm.log.events import (
    Capacity,
    EngineDead,
    FtStatus,
    LogEvent,
    RankIncident,
    Startup,
    Stats,
    interpret,
)
from poolwatch.sources.vllm.log.lines import Calendar
from poolwatch.sources.vllm.log.records import RecordAssembler
from poolwatch.sources.vllm.log.state import VllmLogFold, rank_label

__all__ = ["AGGREGATED", "Replayer"]

AGGREGATED = "all"  # the rank shown for the "N Engines Aggregated" statistics line
_POOL_FAULT = "vLLM's own block-pool check failed"


class Replayer:
    """Feed it lines; it calls ``emit`` with timeline rows in time order and fills a report."""

    def __init__(
        self, worker: str, emit: Callable[[Row], None], every: float = 60.0, day: dt.date | None = None
    ) -> None:
        """``day`` dates the stamps (vLLM prints no year): the file's day, else today."""
        self._fold = VllmLogFold(worker)
        self._assembler = RecordAssembler(Calendar(day or dt.date.today()))
        self._windows = Windows(emit, every)
        self.report = ReplayReport()

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.report.lines += 1
            for record in self._assembler.feed(line):
                self._record(interpret(record))

    def finish(self) -> ReplayReport:
        for record in self._assembler.flush():
            self._record(interpret(record))
        self._windows.close()
        self.report.split_records = self._assembler.overflowed
        return self.report

    def _record(self, events: list[LogEvent]) -> None:
        self.report.records += 1
        self.report.recognised += bool(events)
        for event in events:
            if isinstance(event, Stats):
                self._stats(event)
            elif isinstance(event, Startup | Capacity | FtStatus):
                self._fold.apply(event)
                self._event_row(event.at, rank_label(event.dp), _describe(event))
            else:
                self._incident(event)

    def _stats(self, event: Stats) -> None:
        rank = AGGREGATED if event.dp is None else rank_label(event.dp)
        snap = self._fold.apply(event)
        verdict = describe(assess_snapshot(snap)) if snap is not None and event.figures.negative else ""
        self.report.ranks.add(rank)
        self._windows.advance(event.at)
        row = self._windows.summary.get(rank)
        if row is None or self._windows.each:
            row = self._windows.summary[rank] = Row(event.at, rank, "stats")
        f = event.figures
        row.batches += 1
        weight = (f.negative, False, abs(f.usage or 0.0))
        if f.usage is not None and weight > row.weights.get(Pool.FULL, (False, False, -1.0)):
            row.weights[Pool.FULL], row.figures[Pool.FULL] = (
                weight,
                f"{'-' if f.negative else ''}{abs(f.usage):.1f}%",
            )
        row.running = max(row.running or 0, f.running or 0)
        row.waiting = max(row.waiting or 0, f.waiting or 0)
        row.verdict = row.verdict or verdict
        if verdict:
            self._first(Row(event.at, rank, "stats", verdict=verdict), "")
        if self._windows.each:
            self._windows.close()

    def _incident(self, event: RankIncident | EngineDead) -> None:
        snap = self._fold.apply(event)
        if snap is None:
            return  # the API server's word on an engine already known dead
        (incident,) = snap.incidents
        rank = rank_label(snap.worker.dp_rank)
        kind = incident.kind.value
        self.report.incidents[kind] = self.report.incidents.get(kind, 0) + 1
        in_pool = isinstance(event, RankIncident) and event.in_pool
        row = self._event_row(incident.at, rank, kind, _POOL_FAULT if in_pool else "")
        if in_pool:
            self._first(row, incident.message)

    def _event_row(self, at: float, rank: str, event: str, verdict: str = "") -> Row:
        self.report.ranks.add(rank)
        self._windows.advance(at)
        row = Row(at, rank, event, verdict=verdict)
        self._windows.add(row)
        return row

    def _first(self, row: Row, message: str) -> None:
        if self.report.first_problem is None:
            first_line = message.splitlines()[0] if message else ""
            verdict = f"{row.verdict}: {first_line}" if first_line else row.verdict
            self.report.first_problem = Problem(row.at, row.rank, row.event, verdict, first_line)


def _describe(event: Startup | Capacity | FtStatus) -> str:
    if isinstance(event, Startup):
        return f"start v{event.release}"
    if isinstance(event, Capacity):
        return f"kv {event.tokens:,} tokens"
    return f"ft {event.status}"

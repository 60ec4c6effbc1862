"""Replay a saved engine log: pool usage per rank over time and the first provable fault.

The same stages as the live log source run over the lines in order, in constant memory (the line
assembler, records, the engine's dialect, the fold): batch and statistics lines are summarised per
rank over windows of ``every`` seconds (``every=0`` keeps every line; the pool columns show the
window's worst figure, a negative one first), and each incident, start and note gets its own row.

The *first problem* is the earliest moment the accounting provably went wrong: the engine reported
a leak or failed a check, a figure proves an imbalance on its own (a negative used count, a usage
printed below zero), or the engine named a pool error (a block-pool assert, a double free its own
check refused).  A pool error that proves nothing alone (blocks still held at a prefix-cache reset)
gets its row and is counted, but is no first problem.  A *stall* -- a rank with requests queued and
nothing served for :data:`STALL_LINES` lines in a row -- is a row of its own, once per stall.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable

from poolwatch.conservation import Balance, Basis, Finding, assess_snapshot, describe, used
from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sources.logfile.assembler import LineAssembler
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.events import (
    Dead,
    ErrorClass,
    Figures,
    LogEvent,
    Note,
    PoolError,
    PoolSize,
    RankIncident,
    Start,
)
from poolwatch.sources.logfile.fold import LogFold
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import LogRecord, RecordAssembler
from poolwatch.sources.logfile.replay import UNATTRIBUTED, Problem, ReplayReport, Row, Windows

__all__ = ["AGGREGATED", "STALL_LINES", "Replayer"]

ACCOUNTING = (IncidentKind.LEAK_DETECTED, IncidentKind.BUSY_CHECK_FAILED, IncidentKind.TREE_SANITY_FAILED)
AGGREGATED = "all"  # the rank shown for figures that are no one rank's (vLLM's aggregated line)
STALL_LINES = 6  # lines in a row with requests queued and zero throughput: a stall
_NONE = (False, False, -1.0)  # below every figure's weight


class Replayer:
    """Feed it lines; it calls ``emit`` with timeline rows in time order and fills a report."""

    def __init__(
        self,
        dialect: LogDialect,
        worker: str,
        emit: Callable[[Row], None],
        every: float = 60.0,
        day: dt.date | None = None,
    ) -> None:
        """``day`` dates stamps that carry no date (a time of day) or no year."""
        self._dialect = dialect
        self._reader = dialect.reader(day)
        self._lines = LineAssembler(self._reader, dialect.wraps, dialect.unglue, dialect.own_lead)
        self._records = RecordAssembler(dialect.framing)
        self._fold = LogFold(worker, engine=dialect.engine, source=dialect.source)
        self._windows = Windows(emit, every)
        self._idle_lines: dict[str, int] = {}  # per rank: figures in a row queued with zero throughput
        self.report = ReplayReport()
        self.report.assembly = self._lines.stats

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.report.lines += 1
            for logical in self._lines.feed(line):
                for record in self._records.feed(logical.text, logical.head):
                    self._record(record)

    def finish(self) -> ReplayReport:
        for logical in self._lines.flush():
            for record in self._records.feed(logical.text, logical.head):
                self._record(record)
        for record in self._records.flush():
            self._record(record)
        self._windows.close()
        self.report.split_records = self._records.overflowed
        return self.report

    def _record(self, record: LogRecord) -> None:
        events = self._dialect.interpret(record)
        self.report.records += 1
        self.report.recognised += bool(events) or record.damaged
        damaged = record.damaged or any(isinstance(e, Figures) and e.damaged for e in events)
        self.report.damaged += damaged
        self.report.damaged_unread += damaged and not record.attributed
        for event in events:
            self._event(event)

    def _event(self, event: LogEvent) -> None:
        if isinstance(event, Figures):
            self._figures(event)
        elif isinstance(event, PoolSize):
            self._fold.apply(event)
        elif isinstance(event, Start):
            self._fold.apply(event)
            self._row(Row(event.at, _label(event.ranks), f"start v{event.release}", dated=self._dated))
        elif isinstance(event, Note):
            rank = UNATTRIBUTED if event.ranks is None and event.error is not None else _label(event.ranks)
            row = Row(event.at, rank, event.text, dated=self._dated, error=event.error)
            self._row(row)
            if event.error is not None:
                self._count(event.error)
                if event.error.proven:
                    self._first(row, "")
        elif isinstance(event, RankIncident) and event.ranks is None:
            self._fold.apply(event)
            self._incident(event.incident, UNATTRIBUTED, self._fold.detached(event), event.error)
        elif isinstance(event, RankIncident | Dead):
            snap = self._fold.apply(event)
            if snap is not None:  # None: a death already known, or a rank past the cap
                (incident,) = snap.incidents
                error = event.error if isinstance(event, RankIncident) else None
                self._incident(incident, _label(event.ranks or Ranks()), snap, error)

    def _figures(self, event: Figures) -> None:
        rank = _label(event.ranks)
        verdict = ""
        if event.negative or any(v < 0 for v in event.used.values()):
            snap = self._fold.apply(event)
            verdict = _verdict(assess_snapshot(snap)) if snap is not None else ""
        elif event.role is not None:
            self._fold.note_role(event.role)  # a busy line proves nothing else: no snapshot
        self.report.ranks.add(rank)
        self._windows.advance(event.at)
        row = self._windows.summary.get(rank)
        if row is None or self._windows.each:
            row = self._windows.summary[rank] = Row(event.at, rank, event.kind, dated=self._dated)
        elif event.kind != "stats":
            row.event = "batches"
        row.batches += 1
        _keep_worst(row, event)
        row.running = max(row.running or 0, event.queues.get("running", 0))
        row.waiting = max(row.waiting or 0, event.queues.get("waiting", 0))
        row.verdict = row.verdict or verdict
        if verdict:
            self._first(Row(event.at, rank, event.kind, verdict=verdict, dated=self._dated), "")
        if self._windows.each:
            self._windows.close()
        self._stall(event, rank)

    def _stall(self, event: Figures, rank: str) -> None:
        queued = event.queues.get("running", 0) + event.queues.get("waiting", 0)
        if not queued or event.throughput is None or event.throughput > 0:
            self._idle_lines.pop(rank, None)
            return
        seen = self._idle_lines[rank] = self._idle_lines.get(rank, 0) + 1
        if seen == STALL_LINES:
            what = f"{queued} requests queued, zero tokens served over {seen} lines"
            error = PoolError(ErrorClass.STALL, what, bugs=self._dialect.stall_bugs, proven=False)
            self._row(Row(event.at, rank, "stall", dated=self._dated, error=error))
            self._count(error)

    def _incident(self, incident: Incident, rank: str, snap: Snapshot, error: PoolError | None) -> None:
        self.report.unattributed += rank == UNATTRIBUTED
        kind = incident.kind
        self.report.incidents[kind.value] = self.report.incidents.get(kind.value, 0) + 1
        verdict = _verdict(assess_snapshot(snap))
        figures = _account_figures(snap)
        row = Row(
            incident.at, rank, kind.value, figures=figures, verdict=verdict, dated=self._dated, error=error
        )
        self._row(row)
        if error is not None:
            self._count(error)
        if kind in ACCOUNTING or verdict or (error is not None and error.proven):
            self._first(row, incident.message)

    def _row(self, row: Row) -> None:
        if row.rank != UNATTRIBUTED:
            self.report.ranks.add(row.rank)
        self._windows.advance(row.at)
        self._windows.add(row)

    def _count(self, error: PoolError) -> None:
        name = error.cls.value
        self.report.errors[name] = self.report.errors.get(name, 0) + 1

    def _first(self, row: Row, message: str) -> None:
        if self.report.first_problem is None:
            first_line = message.splitlines()[0] if message else ""
            error = row.error.describe() if row.error is not None else ""
            self.report.first_problem = Problem(
                row.at, row.rank, row.event, row.verdict, first_line, row.dated, error
            )

    @property
    def _dated(self) -> bool:
        """Whether the log's times so far carry a date (a time-of-day log's do not)."""
        return self._reader.dated


def _verdict(findings: tuple[Finding, ...]) -> str:
    """``describe`` of the findings when one of them proves an imbalance, else ""."""
    proven = any(
        f.balance in (Balance.SURPLUS, Balance.DEFICIT) and f.basis is not Basis.NONE for f in findings
    )
    return describe(tuple(f for f in findings if f.balance is not Balance.UNKNOWN)) if proven else ""


@functools.lru_cache(maxsize=256)
def _label(ranks: Ranks | None) -> str:
    return AGGREGATED if ranks is None else ranks.label()


def _keep_worst(row: Row, event: Figures) -> None:
    """Per pool, keep the figure that matters most in a window: a negative one, a count over a
    ratio, else the largest (the used count of a decode line, else the signed usage)."""
    for pool, count in event.used.items():
        weight = (count < 0, True, float(abs(count)))
        if weight > row.weights.get(pool, _NONE):
            row.weights[pool], row.figures[pool] = weight, str(count)
    for pool, ratio in event.usage.items():
        if pool in event.used:
            continue
        negative = pool in event.negative
        weight = (negative, False, abs(ratio))
        if weight > row.weights.get(pool, _NONE):
            sign = "-" if negative else ""
            shown = f"{sign}{abs(ratio):.1f}%" if event.percent else f"{sign}{abs(ratio):.2f}"
            row.weights[pool], row.figures[pool] = weight, shown


def _account_figures(snap: Snapshot) -> dict[Pool, str]:
    """Per pool, the used count the snapshot's figures give."""
    counts = {pool: used(account) for pool, account in snap.pools.items()}
    return {pool: str(count) for pool, count in counts.items() if count is not None}

"""Replay a saved SGLang log: the timeline of pool usage per rank and the first provable fault.

The log source's parsers run over the lines in order, in constant memory: batch events are
summarised per rank over windows of ``every`` seconds (``every=0`` keeps every event), and each
incident (a leak report, a failed busy check, a tree sanity failure, a crash) gets its own row.
The *first problem* is the earliest moment the accounting provably went wrong: SGLang reported
a leak or failed a check, or a figure proves an imbalance on its own (a negative used count).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable

from poolwatch.conservation import Balance, Basis, Finding, assess_snapshot, describe, used
from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.logfile.replay import UNATTRIBUTED, Problem, ReplayReport, Row, Windows
from poolwatch.sources.sglang.log.events import (
    BatchStats,
    RankIncident,
    UnattributedIncident,
    interpret,
)
from poolwatch.sources.sglang.log.lines import Ranks
from poolwatch.sources.sglang.log.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.state import LogFold

__all__ = ["Replayer"]

ACCOUNTING = (IncidentKind.LEAK_DETECTED, IncidentKind.BUSY_CHECK_FAILED, IncidentKind.TREE_SANITY_FAILED)
_NONE = (False, False, -1.0)  # below every figure's weight


class Replayer:
    """Feed it lines; it calls ``emit`` with timeline rows in time order and fills a report."""

    def __init__(
        self, worker: str, emit: Callable[[Row], None], every: float = 60.0, day: dt.date | None = None
    ) -> None:
        self._fold = LogFold(worker)
        self._assembler = RecordAssembler(day=day)  # ``day`` dates 0.2.x time-of-day prefixes
        self._windows = Windows(emit, every)
        self.report = ReplayReport()

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.report.lines += 1
            for record in self._assembler.feed(line):
                self._record(record)

    def finish(self) -> ReplayReport:
        for record in self._assembler.flush():
            self._record(record)
        self._windows.close()
        self.report.split_records = self._assembler.overflowed
        return self.report

    def _record(self, record: LogRecord) -> None:
        events = interpret(record)
        self.report.records += 1
        self.report.recognised += bool(events) or record.damaged
        damaged = record.damaged or any(isinstance(e, BatchStats) and e.damaged for e in events)
        self.report.damaged += damaged
        self.report.damaged_unread += damaged and not record.attributed
        for event in events:
            if isinstance(event, BatchStats) and not _negative(event):
                if event.role is not None:
                    self._fold.note_role(event.role)
                self._batch(event, "")  # a busy batch proves nothing else: skip the snapshot
                continue
            if isinstance(event, UnattributedIncident):
                self._fold.apply(event)
                self._unattributed(event, self._fold.detached(event))
                continue
            snap = self._fold.apply(event)
            if snap is None:
                continue
            verdict = _verdict(assess_snapshot(snap))
            if isinstance(event, BatchStats):
                self._batch(event, verdict)
            elif isinstance(event, RankIncident):
                self._incident(event, snap, verdict)

    def _incident(self, event: RankIncident, snap: Snapshot, verdict: str) -> None:
        rank = _label(event.ranks)
        self.report.ranks.add(rank)
        self._windows.advance(event.incident.at)
        kind = event.incident.kind
        self.report.incidents[kind.value] = self.report.incidents.get(kind.value, 0) + 1
        figures = _account_figures(snap)
        row = Row(event.incident.at, rank, kind.value, figures=figures, verdict=verdict, dated=self._dated)
        self._windows.add(row)
        if kind in ACCOUNTING or verdict:
            self._first(row, event.incident.message)

    def _unattributed(self, event: UnattributedIncident, detached: Snapshot) -> None:
        """A row under rank ``unattributed``: its figures and verdict are shown, no rank gets them."""
        self.report.unattributed += 1
        self._windows.advance(event.incident.at)
        kind = event.incident.kind
        self.report.incidents[kind.value] = self.report.incidents.get(kind.value, 0) + 1
        verdict = _verdict(assess_snapshot(detached))
        figures = _account_figures(detached)
        at, dated = event.incident.at, self._dated
        row = Row(at, UNATTRIBUTED, kind.value, figures=figures, verdict=verdict, dated=dated)
        self._windows.add(row)
        if kind in ACCOUNTING or verdict:
            self._first(row, event.incident.message)

    def _batch(self, event: BatchStats, verdict: str) -> None:
        rank = _label(event.ranks)
        self.report.ranks.add(rank)
        self._windows.advance(event.at)
        row = self._windows.summary.get(rank)
        if row is None or self._windows.each:
            row = Row(event.at, rank, event.kind, dated=self._dated)
            self._windows.summary[rank] = row
        else:
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

    def _first(self, row: Row, message: str) -> None:
        if self.report.first_problem is None:
            first_line = message.splitlines()[0] if message else ""
            first = Problem(row.at, row.rank, row.event, row.verdict, first_line, row.dated)
            self.report.first_problem = first

    @property
    def _dated(self) -> bool:
        """Whether the log's times so far carry a date (a time-of-day log's do not)."""
        return self._assembler.dated


def _verdict(findings: tuple[Finding, ...]) -> str:
    """``describe`` of the findings when one of them proves an imbalance, else ""."""
    proven = any(
        f.balance in (Balance.SURPLUS, Balance.DEFICIT) and f.basis is not Basis.NONE for f in findings
    )
    return describe(tuple(f for f in findings if f.balance is not Balance.UNKNOWN)) if proven else ""


@functools.lru_cache(maxsize=256)
def _label(ranks: Ranks) -> str:
    return ranks.label()


def _negative(event: BatchStats) -> bool:
    return bool(event.negative) or any(v < 0 for v in event.used.values())


def _keep_worst(row: Row, event: BatchStats) -> None:
    """Per pool, keep the figure that matters most in a window: a negative one, a count over a
    ratio, else the largest (the used count of a decode line, else the signed prefill ratio)."""
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
            row.weights[pool], row.figures[pool] = weight, f"{'-' if negative else ''}{abs(ratio):.2f}"


def _account_figures(snap: Snapshot) -> dict[Pool, str]:
    """Per pool, the used count the snapshot's figures give."""
    counts = {pool: used(account) for pool, account in snap.pools.items()}
    return {pool: str(count) for pool, count in counts.items() if count is not None}

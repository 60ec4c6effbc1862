"""Following one engine's log file as a source: engine-neutral, the engine's dialect given.

A log source reads what was appended since its last scrape (:class:`~poolwatch.sources.logfile.tail.LogTail`,
off the event loop), passes the lines through the same stages as ``poolwatch replay`` -- the line
assembler (collectors' prefixes off, split lines joined), records, the dialect's events, the fold --
and returns the snapshots the sidecar must see (:func:`~poolwatch.sources.logfile.notable.keep_notable`).
A line is parsed once its newline has been written (a collector's partial record waits for its
rest); the record assembler holds the last record until a following line shows it is complete or
a scrape finds the log quiet.  A live file holds the engine's own lines, which no terminal wrapped,
so the live source does not wait for a wrapped line's rest.

A snapshot is stamped with its line's time (not the scrape's), so lines read from a backlog are
shown as old, never as current; a stamp in the future (a zone mismatch) is clamped to now.  An
incident in an orphan block (the log starts inside it: its rank header is gone) is never folded into
rank 0: it is held on the fold (``LogFold.unattributed``) and logged once.  One log names at most
``max_log_ranks`` ranks (:class:`~poolwatch.sources.logfile.fold.LogFold`); past it, further ranks'
lines are dropped and the first drop is logged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import httpx

from poolwatch.limits import DEFAULT_LIMITS
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target
from poolwatch.sources.logfile.assembler import LineAssembler, Logical
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.fold import LogFold
from poolwatch.sources.logfile.notable import keep_notable
from poolwatch.sources.logfile.records import LogRecord, RecordAssembler
from poolwatch.sources.logfile.tail import LogTail

__all__ = ["LogSource"]

log = logging.getLogger("poolwatch.sources")


class LogSource(Source):
    """Follows one engine's log file (all the ranks and processes that write to it)."""

    def __init__(
        self,
        target: Target,
        clock: Callable[[], float],
        dialect: LogDialect,
        *,
        backfill: int = 1 << 20,
        max_read: int = 4 << 20,
        max_ranks: int = DEFAULT_LIMITS.max_log_ranks,
    ) -> None:
        self._target = target
        self._clock = clock
        self._dialect = dialect
        self._tail = LogTail(target.location, backfill=backfill, max_read=max_read)
        now = clock()
        # ``now`` dates stamps without a date or year, and lines read before any stamped one
        reader = dialect.reader(dt.date.fromtimestamp(now))
        self._lines = LineAssembler(reader, dialect.wraps, dialect.unglue, dialect.own_lead)
        self._records = RecordAssembler(dialect.framing, at=now)
        self._fold = LogFold(
            target.worker,
            target.role,
            instance=target.location,
            max_ranks=max_ranks,
            engine=dialect.engine,
            source=dialect.source,
        )
        self._warned = False

    @property
    def target(self) -> Target:
        return self._target

    @property
    def fold(self) -> LogFold:
        return self._fold

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        read = await asyncio.to_thread(self._tail.read)
        records: list[LogRecord] = []
        for line in read.lines:
            records += self._logical(self._lines.feed(line))
        records += self._logical(self._lines.release())
        if not read.lines and not read.more:  # the log is quiet: what is pending is whole
            records += self._logical(self._lines.flush())
            records += self._records.flush(final=False)
        return self._snapshots(records)

    def close(self) -> None:
        self._tail.close()

    def _logical(self, lines: list[Logical]) -> list[LogRecord]:
        return [r for logical in lines for r in self._records.feed(logical.text, logical.head)]

    def _fold_records(self, records: Iterable[LogRecord]) -> Iterator[Snapshot]:
        held = self._fold.unattributed_total
        for record in records:
            for event in self._dialect.interpret(record):
                snap = self._fold.apply(event)
                if snap is not None:
                    yield snap
        if self._fold.unattributed_total > held:
            log.warning(
                "%s: %d incident(s) in a block whose rank header is not in the log; held unattributed: %s",
                self._target.location,
                self._fold.unattributed_total - held,
                self._fold.unattributed[-1].message[:200],
            )

    def _snapshots(self, records: Iterable[LogRecord]) -> list[Snapshot]:
        now = self._clock()
        snaps = [s if s.taken_at <= now else replace(s, taken_at=now) for s in self._fold_records(records)]
        if self._fold.dropped and not self._warned:
            self._warned = True
            log.warning(
                "event=log_ranks_capped path=%s max_log_ranks=%d: lines of further %s are dropped",
                self._target.location,
                self._fold.max_ranks,
                self._dialect.holders,
            )
        return keep_notable(snaps)

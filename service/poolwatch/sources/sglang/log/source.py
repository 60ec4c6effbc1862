"""SGLang's log file as a source: batch lines, leak reports and crashes, as they are written.

Each scrape reads what was appended since the last one (:class:`~poolwatch.sources.logfile.tail.
LogTail`, in a thread), assembles records, interprets them and folds the events into per-rank
snapshots.  It returns, per rank, every snapshot that carries an incident or a negative used
count (the detector must see each) and the latest one.  A record is held until the next
prefixed line shows it is complete, or until a scrape finds the log quiet.  Lines are framed
and interpreted exactly as by ``poolwatch replay`` (prefixes, ANSI, CRLF, interleaved ranks,
every release's formats); a line is parsed only once its newline has been written.

A leak report in an orphan block (the log or excerpt starts inside it: its rank header is gone) is
never folded into rank 0: it is held on the fold (``LogFold.unattributed``) and logged once.

A snapshot is stamped with its line's time (not the scrape's), so lines read from a backlog
are shown as old, never as current; a stamp in the future (a zone mismatch) is clamped to now.
One log names at most ``max_log_ranks`` ranks (:class:`~poolwatch.sources.sglang.log.state.LogFold`);
past it, further ranks are dropped and the first drop is logged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

import httpx

from poolwatch.limits import DEFAULT_LIMITS
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target
from poolwatch.sources.logfile.tail import LogTail
from poolwatch.sources.sglang.log.events import interpret
from poolwatch.sources.sglang.log.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.state import LogFold

__all__ = ["SglangLogSource", "keep_notable"]

log = logging.getLogger("poolwatch.sources")


class SglangLogSource(Source):
    """Follows one SGLang log file (all the ranks that write to it)."""

    def __init__(
        self,
        target: Target,
        clock: Callable[[], float],
        *,
        backfill: int = 1 << 20,
        max_read: int = 4 << 20,
        max_ranks: int = DEFAULT_LIMITS.max_log_ranks,
    ) -> None:
        self._target = target
        self._clock = clock
        self._tail = LogTail(target.location, backfill=backfill, max_read=max_read)
        now = clock()  # dates 0.2.x time-of-day stamps and stamps lines read before any stamped one
        self._assembler = RecordAssembler(day=dt.date.fromtimestamp(now), at=now)
        self._fold = LogFold(target.worker, target.role, instance=target.location, max_ranks=max_ranks)
        self._warned = False

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        read = await asyncio.to_thread(self._tail.read)
        records: list[LogRecord] = []
        for line in read.lines:
            records += self._assembler.feed(line)
        if not read.lines and not read.more:
            records += self._assembler.flush(final=False)  # the log is quiet: the pending record is whole
        return self._snapshots(records)

    def close(self) -> None:
        self._tail.close()

    def _snapshots(self, records: Iterable[LogRecord]) -> list[Snapshot]:
        now = self._clock()
        snaps: list[Snapshot] = []
        held = self._fold.unattributed_total
        for record in records:
            for event in interpret(record):
                snap = self._fold.apply(event)
                if snap is not None:
                    snaps.append(snap if snap.taken_at <= now else replace(snap, taken_at=now))
        if self._fold.unattributed_total > held:
            log.warning(
                "%s: %d incident(s) in a block whose rank header is not in the log; held unattributed: %s",
                self._target.location,
                self._fold.unattributed_total - held,
                self._fold.unattributed[-1].message[:200],
            )
        if self._fold.dropped and not self._warned:
            self._warned = True
            log.warning(
                "event=log_ranks_capped path=%s max_log_ranks=%d: lines of further ranks are dropped",
                self._target.location,
                self._fold.max_ranks,
            )
        return keep_notable(snaps)


def keep_notable(snaps: list[Snapshot]) -> list[Snapshot]:
    """Per rank: every snapshot with an incident or a negative used count, and the last one."""
    last = {s.worker.key: i for i, s in enumerate(snaps)}
    return [s for i, s in enumerate(snaps) if last[s.worker.key] == i or _notable(s)]


def _notable(snap: Snapshot) -> bool:
    return bool(snap.incidents) or any((a.used or 0) < 0 for a in snap.pools.values())

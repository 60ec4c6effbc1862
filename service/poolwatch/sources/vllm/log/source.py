"""vLLM's log file as a source: EngineCore's crashes and the statistics lines, as they are written.

Each scrape reads what was appended since the last one (:class:`~poolwatch.sources.logfile.tail.
LogTail`, in a thread), assembles records, interprets them and folds the events into per-rank
snapshots (:class:`~poolwatch.sources.vllm.log.state.VllmLogFold`).  It returns, per rank, every
snapshot that carries an incident or a negative used count (the detector must see each) and the
latest one.  A record is held until a line shows it is complete, or until a scrape finds the log
quiet.  Lines are framed and interpreted exactly as by ``poolwatch replay``.

vLLM's stamps carry no year: the year is the sidecar's (the year before for a stamp past
tomorrow).  A snapshot is stamped with its line's time; a stamp in the future (a zone mismatch)
is clamped to now.  One log names at most ``max_log_ranks`` engines; past it, further ranks are
dropped and the first drop is logged.
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
from poolwatch.sources.logfile.notable import keep_notable
from poolwatch.sources.logfile.tail import LogTail
from poolwatch.sources.vllm.log.events import interpret
from poolwatch.sources.vllm.log.lines import Calendar
from poolwatch.sources.vllm.log.records import LogRecord, RecordAssembler
from poolwatch.sources.vllm.log.state import VllmLogFold

__all__ = ["VllmLogSource"]

log = logging.getLogger("poolwatch.sources")


class VllmLogSource(Source):
    """Follows one vLLM server's log file (the API server's and every EngineCore's lines)."""

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
        now = clock()
        self._assembler = RecordAssembler(Calendar(dt.date.fromtimestamp(now)), at=now)
        self._fold = VllmLogFold(target.worker, target.role, instance=target.location, max_ranks=max_ranks)
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
            records += self._assembler.flush()  # the log is quiet: the pending records are whole
        return self._snapshots(records)

    def close(self) -> None:
        self._tail.close()

    def _snapshots(self, records: Iterable[LogRecord]) -> list[Snapshot]:
        now = self._clock()
        snaps: list[Snapshot] = []
        for record in records:
            for event in interpret(record):
                snap = self._fold.apply(event)
                if snap is not None:
                    snaps.append(snap if snap.taken_at <= now else replace(snap, taken_at=now))
        if self._fold.dropped and not self._warned:
            self._warned = True
            log.warning(
                "event=log_ranks_capped path=%s max_log_ranks=%d: lines of further engines are dropped",
                self._target.location,
                self._fold.max_ranks,
            )
        return keep_notable(snaps)

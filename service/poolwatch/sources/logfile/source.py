"""Following one engine's log file as a source: engine-neutral.

A log source reads what was appended since its last scrape (:class:`~poolwatch.sources.logfile.tail.LogTail`,
off the event loop), hands each complete line to the engine room's record assembler, folds the
records' events into per-rank snapshots, and returns the ones the sidecar must see
(:func:`~poolwatch.sources.logfile.notable.keep_notable`).  What a line means is the room's:
a subclass says how lines become records (``_feed``, ``_quiet``) and records become snapshots
(``_fold``); the rest -- reading, stamping, the rank cap's one warning -- is done here once.

A snapshot is stamped with its line's time (not the scrape's), so lines read from a backlog are
shown as old, never as current; a stamp in the future (a zone mismatch) is clamped to now.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import httpx

from poolwatch.limits import DEFAULT_LIMITS
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Source, Target
from poolwatch.sources.logfile.notable import keep_notable
from poolwatch.sources.logfile.tail import LogTail

__all__ = ["LogSource"]

log = logging.getLogger("poolwatch.sources")


class LogSource(Source):
    """Follows one log file; an engine room's subclass reads its formats."""

    holders = "ranks"  # what the rank cap counts, in the log line that says it was reached

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
        self._warned = False
        self._begin(clock(), max_ranks)

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        read = await asyncio.to_thread(self._tail.read)
        records: list[Any] = []
        for line in read.lines:
            records += self._feed(line)
        if not read.lines and not read.more:
            records += self._quiet()  # the log is quiet: the pending records are whole
        return self._snapshots(records)

    def close(self) -> None:
        self._tail.close()

    # -- the engine room's part ---------------------------------------------------------------

    def _begin(self, now: float, max_ranks: int) -> None:
        """Make the record assembler and the rank fold (``now`` dates lines read before any stamp)."""
        raise NotImplementedError

    def _feed(self, line: str) -> list[Any]:
        """The records ``line`` completes."""
        raise NotImplementedError

    def _quiet(self) -> list[Any]:
        """The log is quiet: the records still pending, now whole."""
        raise NotImplementedError

    def _fold(self, records: Iterable[Any]) -> Iterator[Snapshot]:
        """The snapshots the records' events make (a rank's state folded forward)."""
        raise NotImplementedError

    def _capped(self) -> tuple[bool, int]:
        """Whether lines of further ranks were dropped, and the cap."""
        raise NotImplementedError

    # -- the rest ---------------------------------------------------------------------------------

    def _snapshots(self, records: Iterable[Any]) -> list[Snapshot]:
        now = self._clock()
        snaps = [s if s.taken_at <= now else replace(s, taken_at=now) for s in self._fold(records)]
        dropped, cap = self._capped()
        if dropped and not self._warned:
            self._warned = True
            log.warning(
                "event=log_ranks_capped path=%s max_log_ranks=%d: lines of further %s are dropped",
                self._target.location,
                cap,
                self.holders,
            )
        return keep_notable(snaps)

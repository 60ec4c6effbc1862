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

What is the same for every engine's log (reading, stamping, the rank cap's warning) is
:class:`~poolwatch.sources.logfile.source.LogSource`'s.
One log names at most ``max_log_ranks`` ranks (:class:`~poolwatch.sources.sglang.log.state.LogFold`);
past it, further ranks are dropped and the first drop is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator

from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.sglang.log.events import interpret
from poolwatch.sources.sglang.log.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.state import LogFold

__all__ = ["SglangLogSource"]

log = logging.getLogger("poolwatch.sources")


class SglangLogSource(LogSource):
    """Follows one SGLang log file (all the ranks that write to it)."""

    def _begin(self, now: float, max_ranks: int) -> None:
        # ``now`` dates 0.2.x time-of-day stamps and stamps lines read before any stamped one
        self._assembler = RecordAssembler(day=dt.date.fromtimestamp(now), at=now)
        target = self._target
        self._state = LogFold(target.worker, target.role, instance=target.location, max_ranks=max_ranks)

    def _feed(self, line: str) -> list[LogRecord]:
        return self._assembler.feed(line)

    def _quiet(self) -> list[LogRecord]:
        return self._assembler.flush(final=False)

    def _fold(self, records: Iterable[LogRecord]) -> Iterator[Snapshot]:
        held = self._state.unattributed_total
        for record in records:
            for event in interpret(record):
                snap = self._state.apply(event)
                if snap is not None:
                    yield snap
        if self._state.unattributed_total > held:
            log.warning(
                "%s: %d incident(s) in a block whose rank header is not in the log; held unattributed: %s",
                self._target.location,
                self._state.unattributed_total - held,
                self._state.unattributed[-1].message[:200],
            )

    def _capped(self) -> tuple[bool, int]:
        return bool(self._state.dropped), self._state.max_ranks

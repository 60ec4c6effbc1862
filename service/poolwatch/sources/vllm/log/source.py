"""vLLM's log file as a source: EngineCore's crashes and the statistics lines, as they are written.

Each scrape reads what was appended since the last one (:class:`~poolwatch.sources.logfile.tail.
LogTail`, in a thread), assembles records, interprets them and folds the events into per-rank
snapshots (:class:`~poolwatch.sources.vllm.log.state.VllmLogFold`).  It returns, per rank, every
snapshot that carries an incident or a negative used count (the detector must see each) and the
latest one.  A record is held until a line shows it is complete, or until a scrape finds the log
quiet.  Lines are framed and interpreted exactly as by ``poolwatch replay``.

vLLM's stamps carry no year: the year is the sidecar's (the year before for a stamp past
tomorrow).  One log names at most ``max_log_ranks`` engines; past it, further ranks are
dropped and the first drop is logged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator

from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.vllm.log.events import interpret
from poolwatch.sources.vllm.log.lines import Calendar
from poolwatch.sources.vllm.log.records import LogRecord, RecordAssembler
from poolwatch.sources.vllm.log.state import VllmLogFold

__all__ = ["VllmLogSource"]


class VllmLogSource(LogSource):
    """Follows one vLLM server's log file (the API server's and every EngineCore's lines)."""

    holders = "engines"

    def _begin(self, now: float, max_ranks: int) -> None:
        self._assembler = RecordAssembler(Calendar(dt.date.fromtimestamp(now)), at=now)
        target = self._target
        self._state = VllmLogFold(target.worker, target.role, instance=target.location, max_ranks=max_ranks)

    def _feed(self, line: str) -> list[LogRecord]:
        return self._assembler.feed(line)

    def _quiet(self) -> list[LogRecord]:
        return self._assembler.flush()

    def _fold(self, records: Iterable[LogRecord]) -> Iterator[Snapshot]:
        for record in records:
            for event in interpret(record):
                snap = self._state.apply(event)
                if snap is not None:
                    yield snap

    def _capped(self) -> tuple[bool, int]:
        return bool(self._state.dropped), self._state.max_ranks

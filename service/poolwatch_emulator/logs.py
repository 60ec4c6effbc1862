"""SGLang-shaped log lines: ``[2025-10-31 10:40:43 DP1 TP0] message`` (reference §5.3).

SGLang's ``configure_logger`` prefixes every line with the time and the rank (`` DP{n}`` when
data-parallel, `` TP{n}`` when ``tp_size > 1``, `` PP{n}`` when ``pp_size > 1``).  A
:class:`LogSink` receives finished lines; the file sink appends and flushes each one so a log
tailer sees it at once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol

from poolwatch_emulator.clock import SimClock

__all__ = ["FileSink", "LogSink", "MemorySink", "RankLog", "rank_prefix"]


class LogSink(Protocol):
    def write(self, line: str) -> None: ...


class MemorySink:
    """Keeps lines in a list (tests, and the default when no log directory is given)."""

    def __init__(self, limit: int = 10_000):
        self.lines: list[str] = []
        self.limit = limit

    def write(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) > self.limit:
            del self.lines[: len(self.lines) - self.limit]


class FileSink:
    """Appends lines to a file (the worker's log), flushing each line."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def write(self, line: str) -> None:
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def rank_prefix(
    *, dp_rank: int | None, tp_rank: int, tp_size: int, pp_rank: int = 0, pp_size: int = 1
) -> str:
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if tp_size > 1:
        prefix += f" TP{tp_rank}"
    if pp_size > 1:
        prefix += f" PP{pp_rank}"
    return prefix


class RankLog:
    """One rank's logger: stamps lines with simulated calendar time and the rank prefix."""

    def __init__(self, sink: LogSink, clock: SimClock, prefix: str):
        self.sink = sink
        self.clock = clock
        self.prefix = prefix

    def _emit(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.clock.unix()))
        self.sink.write(f"[{stamp}{self.prefix}] {message}")

    info = _emit
    warning = _emit
    error = _emit

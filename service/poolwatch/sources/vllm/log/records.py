"""Assembling vLLM log lines into records: one message and the lines that continue it.  Pure.

A message of several lines (a traceback after ``EngineCore encountered a fatal error.``) repeats
its whole prefix on every line, so a *record* is a prefixed line plus the following lines with the
same prefix -- process, pid, level, stamp and ``file:line`` -- unless such a line is a message of
its own (:func:`~poolwatch.sources.vllm.log.formats.opens_record`: two engines' statistics lines in
one second).  Lines without vLLM's prefix continue the open record when they carry its process tag
or while its traceback has not reached its exception line (Python's own report of a dying process
on stderr); otherwise they form a *headless* record stamped with the last time seen.

Each process has its own open record, so another process's lines printed into the middle of a
traceback (two processes share one stdout) do not cut it: a prefixed line completes the other
processes' records except those still inside a traceback, which wait for their exception line.
At most ``max_open`` records are open at once (the oldest is completed first).

Bounded: a record holds at most ``max_lines`` lines and ``max_chars`` characters; the lines past the
bound start a headless record of the same process, so no line is lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from poolwatch.sources.vllm.log.formats import opens_record
from poolwatch.sources.vllm.log.lines import Calendar, VllmLine, clean, parse_line, split_tag

__all__ = ["LogRecord", "RecordAssembler"]

_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log message: its first line (prefix removed) and the lines that continue it."""

    at: float
    process: str  # the process tag ("" when none was shown)
    message: str
    continuation: tuple[str, ...] = ()
    level: str = ""  # "" for a headless record
    headless: bool = False

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.message, *self.continuation)


@dataclass(slots=True)
class _Open:
    at: float
    process: str
    message: str
    key: tuple[str, int, str, float, str] | None  # the prefix its lines repeat (None: none)
    level: str = ""
    headless: bool = False
    rest: list[str] = field(default_factory=list)
    chars: int = 0
    traceback: bool = False  # inside a traceback whose exception line has not been seen

    def record(self) -> LogRecord:
        return LogRecord(self.at, self.process, self.message, tuple(self.rest), self.level, self.headless)

    def add(self, line: str) -> None:
        self.rest.append(line)
        self.chars += len(line)
        if _TRACEBACK in line:
            self.traceback = True
        elif self.traceback and _EXCEPTION_LINE.match(line):
            self.traceback = False


class RecordAssembler:
    """Groups lines into records, one open record per process, bounded as the module docstring says."""

    def __init__(
        self,
        calendar: Calendar,
        *,
        max_lines: int = 200,
        max_chars: int = 64 * 1024,
        max_open: int = 64,
        at: float = 0.0,
    ) -> None:
        """``calendar`` dates the stamps; ``at`` stamps headless lines until a stamped one is seen."""
        self._calendar = calendar
        self._max_lines = max_lines
        self._max_chars = max_chars
        self._max_open = max_open
        self._open: dict[str, _Open] = {}  # by process tag, the oldest first
        self._last_at = at
        self._last_process = ""  # the process of the last line that had a tag or a prefix
        self.overflowed = 0  # records split because they passed the bound

    @property
    def pending(self) -> bool:
        return bool(self._open)

    def feed(self, line: str) -> list[LogRecord]:
        """Add one raw line (without its newline); returns the records it completes, if any."""
        head = parse_line(line, self._calendar)
        if head is not None:
            self._last_at, self._last_process = head.at, head.process
            current = self._open.get(head.process)
            if current is not None and current.key == head.key and not opens_record(head.message):
                return self._extend(current, head.message)
            return self._settled(head.process) + self._replace(head.process, self._start(head))
        process, rest = split_tag(clean(line))
        if process is None:  # untagged: Python's own report goes on the traceback being written
            for candidate in (self._open.get(""), self._open.get(self._last_process)):
                if candidate is not None and candidate.traceback:
                    return self._extend(candidate, rest)
            process = ""
        else:
            self._last_process = process
            current = self._open.get(process)
            if current is not None:
                return self._extend(current, rest)
        fresh = _Open(self._last_at, process, rest, None, headless=True, traceback=_TRACEBACK in rest)
        return self._replace(process, fresh)

    def flush(self) -> list[LogRecord]:
        """Complete every pending record (at the end of input, or when a live log has gone quiet)."""
        done = [current.record() for current in self._open.values()]
        self._open = {}
        return done

    def _settled(self, process: str) -> list[LogRecord]:
        """Other processes' open records that a new prefixed line shows complete: all but those
        inside a traceback (another process may print into the middle of one)."""
        done = [p for p, o in self._open.items() if p != process and not o.traceback]
        return [self._open.pop(p).record() for p in done]

    def _replace(self, process: str, new: _Open) -> list[LogRecord]:
        """``new`` becomes the process's open record; its previous one (and the oldest record of all,
        past ``max_open`` processes) is complete."""
        done = []
        old = self._open.pop(process, None)
        if old is not None:
            done.append(old.record())
        if len(self._open) >= self._max_open:
            oldest = next(iter(self._open))
            done.append(self._open.pop(oldest).record())
        self._open[process] = new
        return done

    def _start(self, head: VllmLine) -> _Open:
        traceback = _TRACEBACK in head.message
        return _Open(head.at, head.process, head.message, head.key, head.level, traceback=traceback)

    def _extend(self, current: _Open, line: str) -> list[LogRecord]:
        if len(current.rest) >= self._max_lines or current.chars + len(line) > self._max_chars:
            self.overflowed += 1
            split = _Open(
                current.at, current.process, line, current.key, headless=True, traceback=current.traceback
            )
            return self._replace(current.process, split)
        current.add(line)
        return []

"""SGLang log lines: the ``[timestamp ranks]`` prefix and multi-line record assembly.  Pure.

SGLang's scheduler processes log through ``logging.basicConfig`` with the format
``[%(asctime)s[.%(msecs)03d]<prefix>] %(message)s`` where the prefix names the rank, e.g.
``[2025-10-31 10:40:43 TP0] ...`` or ``[2026-05-16 08:00:01.123 DP1 PP0 TP3 EP3] ...``.  A
message that spans several lines (a traceback, the leak report of the Mamba check) continues
on lines without a prefix, so a *record* is one prefixed line plus the unprefixed lines after it.

Timestamps carry no time zone; they are read as the local time of the machine that parses them
(the sidecar shares its pod's clock and zone with SGLang).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

__all__ = ["LogRecord", "PrefixedLine", "Ranks", "RecordAssembler", "parse_line"]

_PREFIX = re.compile(
    r"^\[(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?(?P<msg>.*)$",
    re.DOTALL,
)
_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)")


@dataclass(frozen=True, slots=True, order=True)
class Ranks:
    """The data-, tensor- and pipeline-parallel rank a log line came from (0 when not shown)."""

    dp: int = 0
    tp: int = 0
    pp: int = 0

    def label(self) -> str:
        return f"dp{self.dp}-tp{self.tp}-pp{self.pp}"


@dataclass(frozen=True, slots=True)
class PrefixedLine:
    at: float  # unix seconds
    ranks: Ranks
    message: str


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log message: its prefixed first line and any continuation lines."""

    at: float
    ranks: Ranks
    message: str
    continuation: tuple[str, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.message, *self.continuation)


def parse_line(line: str) -> PrefixedLine | None:
    """The prefix of a scheduler log line, or ``None`` for a line without one (a continuation)."""
    if not line.startswith("["):  # most continuation lines: skip the regex
        return None
    m = _PREFIX.match(line.rstrip("\r\n"))
    if m is None:
        return None
    try:  # the datetime constructor, not strptime: 20x cheaper, and replay reads millions of lines
        stamp = dt.datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
    except ValueError:
        return None
    fraction = float(f"0.{m['ms']}") if m["ms"] else 0.0
    return PrefixedLine(stamp.timestamp() + fraction, _ranks(m["tags"]), m["msg"])


def _ranks(tags: str) -> Ranks:
    found = {name: int(num) for name, num in _TAG.findall(tags)}
    return Ranks(dp=found.get("DP", 0), tp=found.get("TP", 0), pp=found.get("PP", 0))


class RecordAssembler:
    """Groups lines into records.  Bounded: a record keeps at most ``max_lines`` continuation
    lines of at most ``max_chars`` characters in all; the rest is counted in ``dropped``."""

    def __init__(self, max_lines: int = 200, max_chars: int = 64 * 1024) -> None:
        self._max_lines = max_lines
        self._max_chars = max_chars
        self._head: PrefixedLine | None = None
        self._rest: list[str] = []
        self._chars = 0
        self.dropped = 0

    @property
    def pending(self) -> bool:
        return self._head is not None

    def feed(self, line: str) -> list[LogRecord]:
        """Add one line (without its newline); returns the record it completes, if any."""
        head = parse_line(line)
        if head is None:
            self._continue(line.rstrip("\r\n"))
            return []
        done = self.flush()
        self._head = head
        return done

    def flush(self) -> list[LogRecord]:
        """Complete the pending record (at the end of input, or when the log has gone quiet)."""
        if self._head is None:
            return []
        record = LogRecord(self._head.at, self._head.ranks, self._head.message, tuple(self._rest))
        self._head, self._rest, self._chars = None, [], 0
        return [record]

    def _continue(self, line: str) -> None:
        fits = len(self._rest) < self._max_lines and self._chars + len(line) <= self._max_chars
        if self._head is None or not fits:
            self.dropped += 1
            return
        self._rest.append(line)
        self._chars += len(line)

"""Assembling SGLang log lines into records: one message and the lines that continue it.  Pure.

A message that spans several lines (a traceback, a multi-pool leak report) continues on lines
without a prefix, so a *record* is one prefixed line plus the unprefixed lines after it.  What
real logs add to that picture:

* lines with no prefixed line before them (an exception printed on its own, Python's
  ``warnings`` output, the start of a log cut by rotation) form a *headless* record, stamped with
  the time and ranks of the last prefixed line, instead of being dropped;
* another rank's one-line message printed into the middle of a traceback is an *interjection*:
  it is a record of its own, and the traceback goes on collecting the lines that follow it (until
  its exception line, a line of its own rank, or the record bound; another traceback or a report
  is never an interjection);
* lines before the log's first prefixed line (an excerpt or a rotated file that starts inside a
  traceback or a leak report: its rank header lies before the excerpt) are an *orphan*: no line
  proves their rank, so once a prefixed line shows the log has rank headers they are returned
  with ``attributed=False`` (never as rank 0); in a log with no prefixes at all (0.1.x; no
  prefixed line in the first ``prefixless_after`` lines, or none by the end of a replay) they
  keep the old stamping;
* a record is bounded (``max_lines`` lines, ``max_chars`` characters); the lines past the bound
  start a headless record with the same time and ranks, so no line is lost;
* a time-of-day prefix (0.2.x) is dated with the day of the last dated line, else ``day``, and
  moves to the next day when the clock goes back by more than 12 hours (midnight).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from poolwatch.sources.sglang.log.leak_message import match_format
from poolwatch.sources.sglang.log.lines import PrefixedLine, Ranks, clean, parse_line

__all__ = ["LogRecord", "RecordAssembler"]

_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b")
_HALF_DAY = 12 * 3600


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log message: its first line and any continuation lines."""

    at: float
    ranks: Ranks
    message: str
    continuation: tuple[str, ...] = ()
    headless: bool = False  # no prefixed line: time and ranks are the last ones seen
    attributed: bool = True  # False: an orphan block, no line proves its rank (``ranks`` means nothing)

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.message, *self.continuation)


@dataclass(slots=True)
class _Open:
    at: float
    ranks: Ranks
    message: str
    headless: bool
    rest: list[str] = field(default_factory=list)
    chars: int = 0
    traceback: bool = False  # a traceback whose exception line has not been seen yet
    orphan: bool = False  # opened before any prefixed line

    def record(self) -> LogRecord:
        return LogRecord(self.at, self.ranks, self.message, tuple(self.rest), self.headless)


class RecordAssembler:
    """Groups lines into records, bounded as the module docstring says."""

    def __init__(
        self,
        max_lines: int = 200,
        max_chars: int = 64 * 1024,
        day: dt.date | None = None,
        at: float = 0.0,
        prefixless_after: int = 1000,
    ) -> None:
        """``day`` dates time-of-day prefixes until a dated line is seen; ``at`` stamps headless
        lines until any stamped line is seen (the live source passes now)."""
        self._max_lines = max_lines
        self._max_chars = max_chars
        self._day = day or dt.date(1970, 1, 1)
        self._open: _Open | None = None
        self._last_at = at
        self._last_ranks = Ranks()
        self._dated_at: float | None = None
        self.overflowed = 0  # records split because they passed the bound
        self._prefixes: bool | None = None  # whether the log has rank prefixes (None: not known yet)
        self._prefixless_after = prefixless_after
        self._lines = 0
        self._held: list[LogRecord] = []  # orphan records, until the log shows whether it has prefixes
        self.unattributed = 0  # orphan records returned with ``attributed=False``

    @property
    def pending(self) -> bool:
        return self._open is not None

    def feed(self, line: str) -> list[LogRecord]:
        """Add one line (without its newline); returns the records it completes, if any."""
        head = parse_line(line, self._day)
        if head is None:
            self._lines += 1
            done = self._continue(clean(line))
            if self._prefixes is None and self._lines >= self._prefixless_after:
                done = self._decide(prefixes=False) + done  # a log without prefixes (0.1.x)
            return done
        head = self._dated(head)
        self._last_at, self._last_ranks = head.at, head.ranks
        settled = self._decide(prefixes=True) if self._prefixes is None else []
        if self._interjection(head):
            return [*settled, LogRecord(head.at, head.ranks, head.message)]
        done = settled + self.flush(final=False)
        self._open = _Open(head.at, head.ranks, head.message, False, traceback=_TRACEBACK in head.message)
        return done

    def flush(self, *, final: bool = True) -> list[LogRecord]:
        """Complete the pending record: at the end of input (``final``), or when a live log has gone
        quiet (``final=False``: an orphan is then held until a prefixed line settles it)."""
        done: list[LogRecord] = []
        if self._open is not None:
            current, self._open = self._open, None
            done = self._settle(current)
        if final and self._prefixes is None:
            done = self._decide(prefixes=False) + done
        return done

    def _settle(self, current: _Open) -> list[LogRecord]:
        record = current.record()
        if not current.orphan or self._prefixes is False:
            return [record]
        if self._prefixes:
            self.unattributed += 1
            return [replace(record, attributed=False)]
        out: list[LogRecord] = []
        if len(self._held) >= 16:  # bounded: the oldest goes out unattributed
            self.unattributed += 1
            out = [replace(self._held.pop(0), attributed=False)]
        self._held.append(record)
        return out

    def _decide(self, *, prefixes: bool) -> list[LogRecord]:
        """The log has rank prefixes (held orphans go out unattributed) or has none (0.1.x: they go
        out stamped as before)."""
        self._prefixes = prefixes
        held, self._held = self._held, []
        if not prefixes:
            return held
        self.unattributed += len(held)
        return [replace(r, attributed=False) for r in held]

    def _interjection(self, head: PrefixedLine) -> bool:
        """Another rank's line inside an unfinished traceback, and neither a traceback nor a
        self-check report itself (those can go on over several lines of their own)."""
        current = self._open
        if current is None or not current.traceback or head.ranks == current.ranks:
            return False
        return _TRACEBACK not in head.message and match_format(head.message) is None

    def _dated(self, head: PrefixedLine) -> PrefixedLine:
        if head.dated:
            self._dated_at = head.at
            return head
        day = self._day
        if self._dated_at is not None:  # date.fromtimestamp only when a time-of-day line needs it
            day, self._dated_at = dt.date.fromtimestamp(self._dated_at), None
        at = head.at + (day - self._day).days * 86400
        if at < self._last_at - _HALF_DAY:  # a time-of-day prefix went past midnight
            day, at = day + dt.timedelta(days=1), at + 86400
        self._day = day
        return PrefixedLine(at, head.ranks, head.message, dated=False)

    def _continue(self, line: str) -> list[LogRecord]:
        current = self._open
        if current is None:
            orphan = self._prefixes is None
            self._open = _Open(
                self._last_at, self._last_ranks, line, True, traceback=_TRACEBACK in line, orphan=orphan
            )
            return []
        if len(current.rest) >= self._max_lines or current.chars + len(line) > self._max_chars:
            self.overflowed += 1
            done = self.flush(final=False)
            self._open = _Open(current.at, current.ranks, line, True, orphan=current.orphan)
            return done
        current.rest.append(line)
        current.chars += len(line)
        if _TRACEBACK in line:
            current.traceback = True
        elif current.traceback and _EXCEPTION_LINE.match(line):
            current.traceback = False
        return []

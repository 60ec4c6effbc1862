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
  moves to the next day when the clock goes back by more than 12 hours (midnight); without a
  ``day`` such lines are on :data:`UNDATED_DAY` (``dated`` stays False: ``poolwatch replay`` shows
  their time of day, never a date the log does not hold);
* ranks without a time (``[TP5 EP5] ...``) start a record of those ranks, at the last time seen;
* a batch line whose start is damaged (its prefix garbled or cut: ``5-10-31 10:40:43 TP0] Decode
  batch ...``, ``\ufffd\ufffd...``) is a record of its own, marked ``damaged``: of the ranks its
  prefix still names, else unattributed; never a continuation of the record before it;
* orphans of a log without prefixes keep the old stamping, unless their report is in a format
  only releases that write rank prefixes use (0.2.x on): then no line proves their rank and they
  go out unattributed (a lone leak report cut out of a traceback).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from poolwatch.sources.logfile.replay import UNDATED_DAY
from poolwatch.sources.sglang.log.leak_message import match_format
from poolwatch.sources.sglang.log.lines import PrefixedLine, Ranks, clean, parse_line, rank_tags

__all__ = ["LogRecord", "RecordAssembler"]

_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b")
_HALF_DAY = 12 * 3600
# what is left of a damaged prefix: its rank tags and "] " within the first characters
_PREFIX_TAIL = re.compile(r"^[^\]\n]{0,40}?(?P<tags>(?: [A-Z][A-Z_]{0,15}\d{1,6}){1,12})\] ")
_BATCH_HINTS = ("#running-req: ", "#queue-req: ")


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log message: its first line and any continuation lines."""

    at: float
    ranks: Ranks
    message: str
    continuation: tuple[str, ...] = ()
    headless: bool = False  # no prefixed line: time and ranks are the last ones seen
    attributed: bool = True  # False: an orphan block, no line proves its rank (``ranks`` means nothing)
    damaged: bool = False  # a batch line whose start was damaged (its prefix garbled or cut)

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


def salvage(line: str) -> tuple[Ranks | None, str] | None:
    """A batch line whose start is damaged: ``(the ranks its prefix still names, else None; the
    text after the prefix)``; ``None`` for any other line without a prefix (a continuation)."""
    if not any(hint in line for hint in _BATCH_HINTS):
        return None
    text = clean(line)
    m = _PREFIX_TAIL.match(text)
    if m is None:
        return None, text
    return rank_tags(m["tags"]), text[m.end() :]


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
        self._day = day or UNDATED_DAY
        self.dated = day is not None  # a date is known: given, or read from a dated line
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
            if self._prefixes and (damaged := salvage(line)) is not None:
                return self._damaged(*damaged)
            self._lines += 1
            done = self._continue(clean(line))
            if self._prefixes is None and self._lines >= self._prefixless_after:
                done = self._decide(prefixes=False) + done  # a log without prefixes (0.1.x)
            return done
        if head.timed:
            head = self._dated(head)
            self._last_at = head.at
        else:  # ranks without a time: the line is at the last time seen
            head = PrefixedLine(self._last_at, head.ranks, head.message, dated=False, timed=False)
        self._last_ranks = head.ranks
        settled = self._decide(prefixes=True) if self._prefixes is None else []
        if self._interjection(head):
            return [*settled, LogRecord(head.at, head.ranks, head.message)]
        done = settled + self.flush(final=False)
        self._open = _Open(head.at, head.ranks, head.message, False, traceback=_TRACEBACK in head.message)
        return done

    def _damaged(self, ranks: Ranks | None, text: str) -> list[LogRecord]:
        """A batch line whose start is damaged, in a log with prefixes: a record of its own (an
        unfinished traceback goes on around it, as around another rank's line)."""
        record = LogRecord(self._last_at, ranks or Ranks(), text, attributed=ranks is not None, damaged=True)
        self.unattributed += ranks is None
        current = self._open
        if current is not None and current.traceback:
            return [record]
        return [*self.flush(final=False), record]

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
        out stamped as before, unless their report's format proves a release that prefixes)."""
        self._prefixes = prefixes
        held, self._held = self._held, []
        out = []
        for record in held:
            unproven = prefixes or _prefixed_release(record)
            self.unattributed += unproven
            out.append(replace(record, attributed=False) if unproven else record)
        return out

    def _interjection(self, head: PrefixedLine) -> bool:
        """Another rank's line inside an unfinished traceback, and neither a traceback nor a
        self-check report itself (those can go on over several lines of their own)."""
        current = self._open
        if current is None or not current.traceback or head.ranks == current.ranks:
            return False
        return _TRACEBACK not in head.message and match_format(head.message) is None

    def _dated(self, head: PrefixedLine) -> PrefixedLine:
        if head.dated:
            self._dated_at, self.dated = head.at, True
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


def _prefixed_release(record: LogRecord) -> bool:
    """Whether a report in ``record`` is in a format only releases that write rank prefixes use."""
    return any((fmt := match_format(line)) is not None and fmt.prefixed for line in record.lines)

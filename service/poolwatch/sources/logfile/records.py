"""Grouping an engine's lines into records: one message and the lines that continue it.  Pure.

A line with the engine's prefix (a :class:`~poolwatch.sources.logfile.heads.Head`) starts a
message; lines without one continue it (a traceback, a report's second line).  How an engine
frames its messages is its dialect's (:class:`Framing`):

* an engine that **repeats its prefix** on every line of a message (vLLM) keeps one open record
  per writer (``Head.stream``, its process): lines repeating the prefix extend it, a line without a
  prefix joins its process tag's record, else the traceback being written, else is a *headless*
  record of its own; a new message completes the other writers' records except those inside a
  traceback (two processes share one stdout);
* an engine that does not (SGLang) has one current record: lines without a prefix continue it;
  another writer's one-line message inside an unfinished traceback is an *interjection* (a record
  of its own, the traceback goes on); a line in Python's own stderr shape (``Traceback (most recent
  call last):``, ``path.py:N: UserWarning: ...``) starts a headless record of its own, except a
  traceback right after an error-level message (``logger.exception``'s shape), which is that
  message's.

For every engine: lines before the log's first prefixed line are an *orphan* (an excerpt that starts
inside a traceback): once a prefixed line shows the log has prefixes they go out with
``attributed=False`` (never as rank 0's); in a log without any prefix (no prefixed line in the first
``prefixless_after`` lines, or none by the end) they are kept as they are, unless their text proves a
release that prefixes its lines.  A damaged prefix the dialect can still read (``salvage``) is a
record of its own, ``damaged``.  A record is bounded (``max_lines``, ``max_chars``): the lines past
the bound start a headless record of the same writer, so no line is lost.

Kept whole: one state machine (the open records, the orphan block, the interjection inside a
traceback) that every line passes through once; its two framings share the same state and bounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from poolwatch.sources.logfile.heads import Head, Ranks

__all__ = ["Framing", "LogRecord", "RecordAssembler"]

TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b")
_STDERR_START = re.compile(r"Traceback \(most recent call last\):|\S{1,500}\.py:\d{1,7}: \w*Warning: ")
_MAX_HELD = 16
_ERROR_LEVELS = frozenset(["ERROR", "CRITICAL", "FATAL"])


def _logs_its_traceback(current: _Open, line: str) -> bool:
    """``logger.exception``'s shape: an error-level message, its traceback on the very next line
    (not Python's own stderr, which no prefix introduces)."""
    return not current.rest and current.level in _ERROR_LEVELS and line.startswith(TRACEBACK)


def _untagged(text: str) -> tuple[str | None, Ranks | None, str]:
    return None, None, text


def _never(_: str) -> bool:
    return False


def _never_lines(_: Sequence[str]) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Framing:
    """How an engine's lines make records (the dialect's part of record assembly)."""

    repeats_head: bool = False  # every line of a message repeats the prefix (vLLM's NewLineFormatter)
    # a line without a prefix: (the writer its tag names, its ranks, the text after the tag);
    # (None, None, text) when it carries no writer's tag
    tag: Callable[[str], tuple[str | None, Ranks | None, str]] = _untagged
    salvage: Callable[[str], Head | None] | None = None  # a damaged prefix read by its message
    opens_record: Callable[[str], bool] = (
        _never  # a message that is a record of its own, prefix repeated or not
    )
    multiline: Callable[[str], bool] = (
        _never  # a message that goes on over lines of its own (never an interjection)
    )
    prefixed_only: Callable[[Sequence[str]], bool] = (
        _never_lines  # text only releases that prefix their lines write
    )


# one per line: not frozen, which costs five times as much to build (benchmarks/bench_replay.py);
# never changed once made
@dataclass(slots=True)
class LogRecord:
    """One log message: its first line (prefix removed) and the lines that continue it."""

    at: float
    message: str
    continuation: tuple[str, ...] = ()
    stream: str = ""  # its writer ("" when none is shown)
    ranks: Ranks | None = None  # the rank its prefix names (None: no rank's, or an orphan)
    level: str = ""
    where: str = ""
    headless: bool = False  # no prefixed line: time and writer are the last ones seen
    attributed: bool = True  # False: an orphan block, no line proves its rank
    damaged: bool = False  # its prefix was damaged (read by its message)

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.message, *self.continuation)

    @property
    def source_file(self) -> str:
        return self.where.rpartition(":")[0].rpartition("/")[2]


@dataclass(slots=True)
class _Open:
    at: float
    stream: str
    ranks: Ranks | None
    message: str
    level: str = ""
    where: str = ""
    key: tuple[object, ...] = ()
    headless: bool = False
    rest: list[str] = field(default_factory=list)
    chars: int = 0
    traceback: bool = False  # inside a traceback whose exception line has not been seen
    orphan: bool = False  # opened before any prefixed line

    def record(self) -> LogRecord:
        return LogRecord(
            self.at,
            self.message,
            tuple(self.rest),
            self.stream,
            self.ranks,
            self.level,
            self.where,
            self.headless,
        )

    def add(self, line: str) -> None:
        self.rest.append(line)
        self.chars += len(line)
        if TRACEBACK in line:
            self.traceback = True
        elif self.traceback and _EXCEPTION_LINE.match(line):
            self.traceback = False


class RecordAssembler:
    """Groups lines into records, as the module docstring says."""

    def __init__(
        self,
        framing: Framing,
        *,
        max_lines: int = 200,
        max_chars: int = 64 * 1024,
        max_open: int = 64,
        at: float = 0.0,
        prefixless_after: int = 1000,
    ) -> None:
        """``at`` stamps lines read before any stamped one (the live source passes now)."""
        self._f = framing
        self._max_lines, self._max_chars, self._max_open = max_lines, max_chars, max_open
        self._open: dict[str, _Open] = {}  # by writer, oldest first (one, the current, without repeats)
        self._last_at = at
        self._last_stream = ""
        self._last_ranks: Ranks | None = Ranks()
        self._prefixes: bool | None = None  # whether the log has prefixes (None: not known yet)
        self._prefixless_after = prefixless_after
        self._lines = 0
        self._held: list[LogRecord] = []  # orphans, until the log shows whether it has prefixes
        self.overflowed = 0  # records split at the bound
        self.unattributed = 0  # orphan records returned with ``attributed=False``

    @property
    def pending(self) -> bool:
        return bool(self._open)

    def feed(self, text: str, head: Head | None) -> list[LogRecord]:
        """One line (``head``: its prefix as the dialect read it); the records it completes."""
        if head is None:
            salvage = self._f.salvage
            if self._prefixes and salvage is not None and (damaged := salvage(text)) is not None:
                return self._damaged(damaged)
            self._lines += 1
            done = self._headless(text)
            if self._prefixes is None and self._lines >= self._prefixless_after:
                done = self._decide(prefixes=False) + done
            return done
        at = head.at if head.at is not None else self._last_at
        self._last_at = at
        settled = self._decide(prefixes=True) if self._prefixes is None else []
        if self._f.repeats_head:
            return settled + self._stream_head(head, at)
        return settled + self._single_head(head, at)

    def flush(self, *, final: bool = True) -> list[LogRecord]:
        """Complete every pending record: at the end of input (``final``), or when a live log has gone
        quiet (``final=False``: an orphan is then held until a prefixed line settles it)."""
        done = [r for o in self._open.values() for r in self._settle(o)]
        self._open = {}
        if final and self._prefixes is None:
            done = self._decide(prefixes=False) + done
        return done

    # -- a prefixed line -------------------------------------------------------------------------

    def _single_head(self, head: Head, at: float) -> list[LogRecord]:
        self._last_ranks, self._last_stream = head.ranks, head.stream
        current = self._open.get("")
        interjection = current is not None and current.traceback and head.stream != current.stream
        if interjection and not self._f.multiline(head.message):  # another writer's line in a traceback
            return [LogRecord(at, head.message, (), head.stream, head.ranks, head.level, head.where)]
        done = self.flush(final=False)
        self._open[""] = self._start(head, at)
        return done

    def _stream_head(self, head: Head, at: float) -> list[LogRecord]:
        self._last_stream = head.stream
        current = self._open.get(head.stream)
        if (
            current is not None
            and head.key
            and current.key == head.key
            and not self._f.opens_record(head.message)
        ):
            return self._extend(current, head.message)
        others = [s for s, o in self._open.items() if s != head.stream and not o.traceback]
        done = [r for s in others for r in self._settle(self._open.pop(s))]
        return done + self._replace(head.stream, self._start(head, at))

    def _start(self, head: Head, at: float) -> _Open:
        return _Open(
            at,
            head.stream,
            head.ranks,
            head.message,
            head.level,
            head.where,
            head.key,
            traceback=TRACEBACK in head.message,
        )

    # -- a line without a prefix -----------------------------------------------------------------

    def _headless(self, text: str) -> list[LogRecord]:
        stream, ranks, rest = self._f.tag(text)
        orphan = self._prefixes is None
        if stream is not None:
            self._last_stream = stream
            current = self._open.get(stream)
            if current is not None:
                return self._extend(current, rest)
            fresh = _Open(self._last_at, stream, ranks, rest, headless=True, orphan=orphan)
            fresh.traceback = TRACEBACK in rest
            return self._replace(stream, fresh)
        if self._f.repeats_head:
            for candidate in (self._open.get(""), self._open.get(self._last_stream)):
                if candidate is not None and candidate.traceback:
                    return self._extend(candidate, rest)
            return self._replace("", self._fresh(rest, "", None, orphan))
        current = self._open.get("")
        if current is not None and (
            current.traceback or not _STDERR_START.match(rest) or _logs_its_traceback(current, rest)
        ):
            return self._extend(current, rest)
        done = self.flush(final=False) if current is not None else []
        self._open[""] = self._fresh(rest, self._last_stream, self._last_ranks, orphan)
        return done

    def _fresh(self, text: str, stream: str, ranks: Ranks | None, orphan: bool) -> _Open:
        fresh = _Open(self._last_at, stream, ranks, text, headless=True, orphan=orphan)
        fresh.traceback = TRACEBACK in text
        return fresh

    def _damaged(self, head: Head) -> list[LogRecord]:
        """A line whose prefix is damaged, in a log with prefixes: a record of its own (an unfinished
        traceback goes on around it, as around another writer's line)."""
        attributed = head.ranks is not None
        self.unattributed += not attributed
        at = head.at if head.at is not None else self._last_at
        record = LogRecord(at, head.message, (), head.stream, head.ranks, attributed=attributed, damaged=True)
        current = self._open.get("")
        if current is not None and current.traceback:
            return [record]
        return [*self.flush(final=False), record]

    # -- bookkeeping -----------------------------------------------------------------------------

    def _extend(self, current: _Open, line: str) -> list[LogRecord]:
        if len(current.rest) >= self._max_lines or current.chars + len(line) > self._max_chars:
            self.overflowed += 1
            split = _Open(
                current.at, current.stream, current.ranks, line, headless=True, orphan=current.orphan
            )
            split.traceback = current.traceback
            key = next(s for s, o in self._open.items() if o is current)
            done = self._settle(self._open.pop(key))
            self._open[key] = split
            return done
        current.add(line)
        return []

    def _replace(self, stream: str, new: _Open) -> list[LogRecord]:
        done: list[LogRecord] = []
        old = self._open.pop(stream, None)
        if old is not None:
            done += self._settle(old)
        if len(self._open) >= self._max_open:
            done += self._settle(self._open.pop(next(iter(self._open))))
        self._open[stream] = new
        return done

    def _settle(self, current: _Open) -> list[LogRecord]:
        record = current.record()
        if not current.orphan or self._prefixes is False:
            return [record]
        if self._prefixes:
            self.unattributed += 1
            return [replace(record, attributed=False, ranks=None)]
        out: list[LogRecord] = []
        if len(self._held) >= _MAX_HELD:  # bounded: the oldest goes out unattributed
            self.unattributed += 1
            out = [replace(self._held.pop(0), attributed=False, ranks=None)]
        self._held.append(record)
        return out

    def _decide(self, *, prefixes: bool) -> list[LogRecord]:
        """The log has prefixes (held orphans go out unattributed) or has none (they go out as they
        are, unless their text proves a release that prefixes its lines)."""
        self._prefixes = prefixes
        held, self._held = self._held, []
        out = []
        for record in held:
            unproven = prefixes or self._f.prefixed_only(record.lines)
            self.unattributed += unproven
            out.append(replace(record, attributed=False, ranks=None) if unproven else record)
        return out

"""From the lines a file holds to the lines the engine wrote: the line assembler.  Pure.

What reaches poolwatch is rarely one engine line per file line.  The assembler undoes, in order:

* **collector prefixes** (:mod:`~poolwatch.sources.logfile.prefixes`: CRI, docker, journald,
  compose, a host app's loguru or logging format, ANSI colour), each kind counted;
* **collector splits**: a CRI ``P`` record or a json-file record without its newline is joined to
  the records that finish it;
* **progress bars**: a tqdm bar (``Processed prompts:  75%|█████▎ | 3/4 [00:41<00:09, ...]``) redrawn
  with ``\\r`` or glued in front of a log line is dropped, counted, and the line after it kept;
* **glued lines**: two engine lines printed without a newline between them, split where the
  dialect proves the second begins (``unglue``);
* **wraps**: a line a terminal or log viewer wrapped (``... Waiting: 0 re`` / ``qs, GPU KV cache
  usage: 88.5%``) is joined back.  A piece continues the line before it only by what it lacks and
  what it carries: no engine prefix, not the start of anything (a traceback, an exception line, a
  ``[tag]``), the line before it carries the dialect's figures, the joint is inside a token or at a
  separator (never a value followed by a new word: ``...size()=0`` then ``mamba_available_size=``
  is a real new line), and the piece carries figures or completes one of the dialect's markers.

The last line is held until the next shows whether it continues it (:meth:`flush` releases it).
:attr:`stats` says what was stripped, joined, split and dropped; ``poolwatch replay`` prints it.

Kept whole: the stages share one held line and one count of what was done; the joint rules
(:func:`_joint_of` and the methods around it) are the one decision whether two pieces are one line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from poolwatch.sources.logfile.heads import Head, HeadReader
from poolwatch.sources.logfile.prefixes import strip

__all__ = ["AssemblyStats", "LineAssembler", "Logical", "Wraps"]

CUT = "\u2026"  # a line cut at its length bound ends with this (reader.py, tail.py)
_PREFIX_PIECE = 200  # a piece of a line this short may hold the start of a prefix a terminal cut
_BAR = re.compile(
    r"(?:[^\r|]{0,200}?: *)?\d{1,3}%(?:\|[^|\r]{0,300}\||\s+Completed\s+\|)"
    r" ?[\d.]{1,12}[kMG]?/[\d.?]{1,12}[kMG]? \[[^\]\r]{0,400}\]"
)
_STARTS = re.compile(  # what begins a line of its own: a traceback, an exception, a file, a process tag
    r"Traceback \(|[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit)\b|\S{1,500}\.py:\d|File \""
    r"|\([^()]{1,90} pid=\d"
)
_WHOLE_FIELD = re.compile(r"[A-Za-z_][\w.()]*=-?\d+(?:,|$| )")
_VALUE_END = frozenset("0123456789%)]}.!")  # a value or a sentence ended: a new word is a new line


def _whole(text: str) -> list[str]:
    return [text]


def _never(_: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Wraps:
    """What a wrapped piece of the dialect's lines looks like."""

    fields: re.Pattern[str]  # the figures its lines carry (``Running: 3``, ``available_size=12``)
    markers: tuple[str, ...] = ()  # messages a wrap may cut in two (joined when the joint completes one)
    alone: Callable[[str], bool] = _never  # a piece that is a line of its own (a damaged prefix, a new head)


@dataclass(slots=True)
class AssemblyStats:
    lines: int = 0  # physical lines read
    stripped: Counter[str] = field(default_factory=Counter)  # prefixes taken off, by kind
    rejoined: Counter[str] = field(default_factory=Counter)  # "wrap", "partial"
    dropped: Counter[str] = field(default_factory=Counter)  # "progress bar"
    unglued: int = 0  # physical lines that held several engine lines


# one per line: not frozen, which costs five times as much to build (benchmarks/bench_replay.py);
# never changed once made
@dataclass(slots=True)
class Logical:
    """One line as the engine wrote it, and its prefix as the dialect read it."""

    text: str
    head: Head | None


class LineAssembler:
    """Physical lines in, the engine's lines out (one line late: see the module docstring)."""

    def __init__(
        self,
        reader: HeadReader,
        wraps: Wraps,
        unglue: Callable[[str], list[str]] = _whole,
        own_lead: re.Pattern[str] | None = None,
    ) -> None:
        self._reader = reader
        self._own_lead = own_lead
        self._wraps = wraps
        self._unglue = unglue
        self._pending: Logical | None = None
        self._partial: str | None = None  # a collector-split line waiting for its rest
        self.stats = AssemblyStats()

    def feed(self, line: str) -> list[Logical]:
        self.stats.lines += 1
        stripped = strip(line, self._own_lead)
        if stripped.kinds:
            self.stats.stripped.update(stripped.kinds)
        text = stripped.text
        if self._partial is not None:
            text, self._partial = self._partial + text, None
            self.stats.rejoined["partial"] += 1
        if stripped.partial:
            self._partial = text
            return []
        out: list[Logical] = []
        segments = self._segments(text) if "\r" in text or "%" in text else (text,)  # most lines: neither
        for segment in segments:
            pieces = self._unglue(segment)
            self.stats.unglued += len(pieces) > 1
            for piece in pieces:
                out += self._logical(piece)
        return out

    def release(self) -> list[Logical]:
        """The held line, without waiting for the next (a live log's reader, at the end of what has
        been written: a live file holds the engine's own lines, which no terminal wrapped); a
        collector-split line stays held until its rest is written."""
        pending, self._pending = self._pending, None
        return [] if pending is None else [pending]

    def flush(self) -> list[Logical]:
        """The held line (and a collector-split line that never got its rest), at the end of input
        or when a live log has gone quiet."""
        out: list[Logical] = []
        if self._partial is not None:
            text, self._partial = self._partial, None
            out += self._logical(text)
        if self._pending is not None:
            out.append(self._pending)
            self._pending = None
        return out

    def _segments(self, text: str) -> list[str]:
        """The line's parts between carriage returns, progress bars taken off."""
        parts = text.split("\r") if "\r" in text else [text]
        kept: list[str] = []
        for part in parts:
            rest = part
            if "%" in part and (bar := _BAR.match(part.lstrip())) is not None:
                self.stats.dropped["progress bar"] += 1
                rest = part.lstrip()[bar.end() :]
                if not rest.strip():
                    continue
            kept.append(rest)
        return kept if kept or len(parts) == 1 else []

    def _logical(self, text: str) -> list[Logical]:
        head = self._reader.read(text)
        pending = self._pending
        if head is None and pending is not None:
            joined = self._rejoined(pending, text)
            if joined is not None:
                self._pending = joined
                self.stats.rejoined["wrap"] += 1
                return []
        self._pending = Logical(text, head)
        return [] if pending is None else [pending]

    def _rejoined(self, pending: Logical, text: str) -> Logical | None:
        """``pending`` and ``text`` as one line when ``text`` is the rest of it, else ``None``: the
        rest of a line whose prefix a narrow terminal cut (only the two together have a prefix), or
        the rest of a message (:meth:`_joint`)."""
        if pending.head is None and len(pending.text) <= _PREFIX_PIECE and not pending.text.endswith(CUT):
            head = self._reader.read(pending.text + text)
            if head is not None:
                return Logical(pending.text + text, head)
        joint = self._joint(pending, text)
        return None if joint is None else _joined(pending, joint + text)

    def _joint(self, prev: Logical, text: str) -> str | None:
        """What goes between ``prev`` and ``text`` when ``text`` is the rest of a wrapped line
        ("" or " "), ``None`` when it is a line of its own."""
        before = prev.head.message if prev.head is not None else prev.text
        if not before or not text or before.endswith(CUT) or _STARTS.match(text.lstrip()):
            return None
        if self._wraps.alone(text):
            return None
        if self._completes_marker(before, text):
            return ""
        joint = _joint_of(before[-2:], text)
        if joint is None:
            return None
        straddles = self._straddles(before, joint, text)
        if not self._wraps.fields.search(before) and not straddles:
            return None  # neither the line nor a figure across the joint is the dialect's
        carries = straddles or self._wraps.fields.search(text) is not None
        tail = joint == "" and len(text) <= 16 and not before[-1].isspace() and not text[0].isspace()
        return joint if carries or tail else None  # the rest carries figures, or is a short tail ("5%")

    def _straddles(self, before: str, joint: str, text: str) -> bool:
        """A figure of the dialect's runs across the joint (``throughput:`` / `` 6335.3 tokens/s``)."""
        head = before[-48:]
        around = head + joint + text[:48]
        return any(
            m.start() < len(head) < _number_end(around, m.end()) for m in self._wraps.fields.finditer(around)
        )

    def _completes_marker(self, before: str, text: str) -> bool:
        """A marker of the dialect's runs across the joint (``memory leak det`` / ``ected!``)."""
        for marker in self._wraps.markers:
            n = len(marker)
            head = before[-n:]
            at = (head + text[:n]).find(marker)
            if marker not in before and 0 <= at < len(head) < at + n:
                return True
        return False


def _joint_of(end: str, text: str) -> str | None:
    """The joint between a line ending in ``end`` (its last two characters) and ``text``: "" inside a
    token or at a separator, " " after a comma, ``None`` where a value or a sentence ends and a new
    word or tag begins (a line break).  ``self.`` + ``token_to_kv...`` is a name cut in two."""
    a, b = end[-1], text[0]
    if a == "." and end[:1].isalpha():
        return ""  # a dotted name cut after its dot
    if b.isspace() and a in _VALUE_END and a not in ".!]" and _starts_anew(text.lstrip()):
        return None  # a value, then an indented tag or field: a new line with a leading space
    if a == "," and not b.isspace():
        return " "
    if a.isspace() or b.isspace() or b == ",":
        return ""
    if (a in _VALUE_END and (b.isalpha() or b in "[(")) or (b in "[(" and not a.isalpha()):
        return None
    return ""  # inside a token


def _number_end(text: str, at: int) -> int:
    """Where the number a figure's match ends inside (its first digit) ends: ``size=50|00``."""
    while at < len(text) and (text[at].isdigit() or text[at] == "."):
        at += 1
    return at


def _starts_anew(text: str) -> bool:
    """``text`` starts with a tag or a whole ``name=number`` field: the start of a line of its own."""
    return text[:1] in "[(" or _WHOLE_FIELD.match(text) is not None


def _joined(prev: Logical, rest: str) -> Logical:
    if prev.head is None:
        return Logical(prev.text + rest, None)
    head = prev.head
    joined = Head(
        head.at,
        head.message + rest,
        head.stream,
        head.ranks,
        head.level,
        head.where,
        head.key,
        head.dated,
    )
    return Logical(prev.text + rest, joined)

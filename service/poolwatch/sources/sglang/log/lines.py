"""What an SGLang log line looks like: its ``[time ranks]`` prefix, read into a Head.  Pure.

SGLang's processes log through ``logging.basicConfig`` with ``[%(asctime)s<prefix>] %(message)s``
where the prefix names the rank: ``[2025-10-31 10:40:43 TP0] ...``, ``[2026-05-16 08:00:01.123
DP1 PP0 TP3 EP3] ...``, ``[2025-10-22 20:23:37] ...`` (a single-rank server, or the tokenizer
manager); 0.2.x wrote only the time of day (``[16:43:29 TP0] ...``), and a format without
``%(asctime)s`` writes the ranks alone (``[TP5 EP5] ...``: the line's time is unknown; the ranks are
the line's all the same).  A host app's own ``logging`` format is read too: ``2025-10-31
10:40:43,123 INFO 4242 [scheduler.py:812] message`` (its time, level and source file; ranks 0).
A Ray actor tag ``(SGLangEngine pid=4242) `` and leading spaces before the prefix are tolerated
(collectors' prefixes and ANSI colour are the line assembler's, already gone).

A rank tag is bounded (at most 12 tags of at most 6 digits): anything longer is not a prefix and
the line is a continuation.  Time stamps carry no zone: they are read as the local time of the
machine that parses them (the sidecar shares its pod's clock and zone with SGLang).  A time of day
is dated with the day of the last dated line, else the reader's day, and moves to the next day when
the clock goes back by more than 12 hours (midnight); without a day such lines are on
:data:`~poolwatch.sources.logfile.replay.UNDATED_DAY` and ``dated`` stays False.
"""

from __future__ import annotations

import datetime as dt
import functools
import re

from poolwatch.sources.logfile.heads import Head, Ranks
from poolwatch.sources.logfile.replay import UNDATED_DAY

__all__ = ["SglangReader", "alone", "rank_tags", "ray_tag", "salvage"]

_NATIVE = re.compile(
    r"\[(?:(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2}) )?(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<tags>(?: [A-Z][A-Z_]{0,15}\d{1,6}){0,12})\] ?"
)
# ranks without a time: only rank tags SGLang writes (a TP, DP or PP tag among them), so a message
# that merely starts with a bracketed word ("[W123] ...", "[INFO] ...") is not taken for a prefix
_RANK_TAG = r"(?:[A-Z]{1,8}_)?[A-Z]{2}\d{1,6}"
_RANKS_ONLY = re.compile(rf"\[(?P<tags>(?=[^\]]*\b(?:TP|DP|PP)\d){_RANK_TAG}(?: {_RANK_TAG}){{0,11}})\] ?")
_CUSTOM = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<ms>\d{1,6}))?"
    r"\s+(?:-\s+)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:-\s+)?(?:\d{1,10}\s+)?"
    r"(?:\[(?P<where>[^\]\s]{1,200})\]\s+)?(?:-\s+)?"
)
_RAY = re.compile(r"\((?P<actor>[\w.\-]{1,64}) pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?\) ?")
_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
# what is left of a damaged prefix: its rank tags and "] " within the first characters
_PREFIX_TAIL = re.compile(r"^[^\]\n]{0,40}?(?P<tags>(?: [A-Z][A-Z_]{0,15}\d{1,6}){1,12})\] ")
_BATCH_HINTS = ("#running-req: ", "#queue-req: ")
_BATCH_HEAD = re.compile(r"(?:Prefill|Decode|new fill) batch\b")
_HALF_DAY = 12 * 3600


class SglangReader:
    """Reads SGLang's prefix off a line, dating times of day as the module docstring says."""

    def __init__(self, day: dt.date | None = None) -> None:
        self._day = day or UNDATED_DAY
        self._dated = day is not None  # a date is known: given, or read from a dated line
        self._dated_at: float | None = None
        self._last_at = 0.0

    @property
    def dated(self) -> bool:
        return self._dated

    def read(self, line: str) -> Head | None:
        if line[:1] == "[":  # the common case
            head = _native(line, self._day)
        else:
            text = ray_tag(line).lstrip(" \t")
            head = _native(text, self._day) if text[:1] == "[" else _custom(text, self._day)
        if head is None or head.at is None:
            return head
        return self._stamped(head)

    def _stamped(self, head: Head) -> Head:
        at = head.at
        assert at is not None
        if head.dated:
            self._dated_at, self._dated, self._last_at = at, True, at
            return head
        day = self._day
        if self._dated_at is not None:  # date.fromtimestamp only when a time-of-day line needs it
            day, self._dated_at = dt.date.fromtimestamp(self._dated_at), None
        at += (day - self._day).days * 86400
        if at < self._last_at - _HALF_DAY:  # a time of day went past midnight
            day, at = day + dt.timedelta(days=1), at + 86400
        self._day, self._last_at = day, at
        return Head(at, head.message, head.stream, head.ranks, dated=False)


def ray_tag(text: str) -> str:
    """``text`` without a Ray actor's ``(Actor pid=N) `` tag in front."""
    if text[:1] != "(":
        return text
    m = _RAY.match(text)
    return text if m is None else text[m.end() :]


def salvage(text: str) -> Head | None:
    """A batch line whose start is damaged: its message and the ranks its prefix still names
    (``ranks=None``: none left); ``None`` for any other line without a prefix (a continuation)."""
    if not any(hint in text for hint in _BATCH_HINTS):
        return None
    text = ray_tag(text)
    m = _PREFIX_TAIL.match(text)
    if m is None:
        return Head(None, text, ranks=None)
    ranks = rank_tags(m["tags"])
    return Head(None, text[m.end() :], _stream(ranks), ranks)


def alone(text: str) -> bool:
    """A piece without a prefix that is a batch line of its own, not a wrapped line's rest: what is
    left of a damaged prefix still names ranks (``5-11-03 09:14:08 TP3] ``), or a batch line's head
    stands in it (a wrapped line's rest never holds a second head)."""
    if not any(hint in text for hint in _BATCH_HINTS):
        return False
    return _PREFIX_TAIL.match(ray_tag(text)) is not None or (
        "batch" in text and _BATCH_HEAD.search(text) is not None
    )


def _native(text: str, day: dt.date) -> Head | None:
    m = _NATIVE.match(text)
    if m is None:
        bare = _RANKS_ONLY.match(text)
        if bare is None:
            return None
        ranks = rank_tags(" " + bare["tags"])
        return Head(None, text[bare.end() :], _stream(ranks), ranks, dated=False)
    return _stamped(m, rank_tags(m["tags"]), text[m.end() :], day)


def _custom(text: str, day: dt.date) -> Head | None:
    m = _CUSTOM.match(text)
    if m is None:
        return None
    head = _stamped(m, Ranks(), text[m.end() :], day)
    if head is None:
        return None
    where = m["where"] or ""
    return Head(head.at, head.message, head.stream, head.ranks, m["level"], where if ":" in where else "")


def _stamped(m: re.Match[str], ranks: Ranks, message: str, day: dt.date) -> Head | None:
    dated = m["y"] is not None
    date = (m["y"], m["mo"], m["d"]) if dated else (str(day.year), str(day.month), str(day.day))
    seconds = _seconds(*date, m["h"], m["mi"], m["s"])
    if seconds is None:
        return None
    fraction = float(f"0.{m['ms']}") if m["ms"] else 0.0
    return Head(seconds + fraction, message, _stream(ranks), ranks, dated=dated)


@functools.lru_cache(maxsize=256)
def _seconds(y: str, mo: str, d: str, h: str, mi: str, s: str) -> float | None:
    """Unix seconds of a local time stamp (cached: a log repeats each second many times)."""
    try:  # the datetime constructor, not strptime: 20x cheaper, and replay reads millions of lines
        return dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)).timestamp()
    except ValueError:
        return None


@functools.lru_cache(maxsize=256)
def _stream(ranks: Ranks) -> str:
    return ranks.label()


@functools.lru_cache(maxsize=64)
def rank_tags(tags: str) -> Ranks:
    """The ranks of a prefix's tags (`` DP1 TP3``)."""
    if not tags:
        return Ranks()
    found = {name: int(num) for name, num in _TAG.findall(tags)}
    return Ranks(dp=found.get("DP", 0), tp=found.get("TP", 0), pp=found.get("PP", 0))

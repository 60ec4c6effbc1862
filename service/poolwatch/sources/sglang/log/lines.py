"""SGLang log lines as they look in production: the ``[time ranks]`` prefix and the noise around it.  Pure.

SGLang's processes log through ``logging.basicConfig`` with ``[%(asctime)s<prefix>] %(message)s``
where the prefix names the rank: ``[2025-10-31 10:40:43 TP0] ...``, ``[2026-05-16 08:00:01.123
DP1 PP0 TP3 EP3] ...``; 0.2.x wrote only the time of day (``[16:43:29 TP0] ...``), and a
format without ``%(asctime)s`` writes the ranks alone (``[TP5 EP5] ...``: the line's time is
unknown, ``timed=False``; the ranks are the line's all the same).  What a collector or launcher
adds around that line is tolerated:

* ANSI colour codes anywhere in the line, a trailing ``\\r`` (CRLF), leading spaces;
* a Ray actor prefix ``(SGLangEngine pid=4242) `` (also on continuation lines);
* an ISO timestamp with a level or a CRI stream tag: ``2025-10-31T10:40:43.1Z INFO ``,
  ``2025-10-31T10:40:43.123456789Z stdout F ``;
* a custom ``logging`` format ``2025-10-31 10:40:43,123 INFO 4242 [scheduler.py:812] message``
  (the time is read from it; the ranks are unknown, i.e. 0).

A rank tag is bounded (at most 12 tags of at most 6 digits): anything longer is not a prefix and
the line is a continuation.  Timestamps carry no zone; they are read as the local time of the
machine that parses them (the sidecar shares its pod's clock and zone with SGLang).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass

__all__ = ["PrefixedLine", "Ranks", "clean", "parse_line", "rank_tags"]

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
    r"\s+(?:-\s+)?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:-\s+)?(?:\d{1,10}\s+)?"
    r"(?:\[[^\]\s]{1,200}\]\s+)?(?:-\s+)?"
)
_LEAD = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})? "
    r"(?:(?:stdout|stderr) [FP] |(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +)?)?"
    r"(?:\([\w.\-]{1,64} pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?\) ?)?"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]?")
_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_DAY0 = dt.date(1970, 1, 1)


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
    dated: bool = True  # False for a time-of-day prefix (0.2.x): ``at`` is on the caller's day
    timed: bool = True  # False for ranks without a time (``[TP5 EP5] ...``): ``at`` means nothing


def clean(line: str) -> str:
    """The line without its line ending, ANSI codes and any Ray / ISO / CRI prefix (spaces kept)."""
    line = line.rstrip("\r\n").lstrip("\x00")  # NULs: the hole ``copytruncate`` can leave
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line[:1] in ("(", "1", "2"):
        end = _LEAD.match(line)
        if end is not None and end.end():
            line = line[end.end() :]
    return line


def parse_line(line: str, day: dt.date = _DAY0) -> PrefixedLine | None:
    """The prefix of a log line, or ``None`` for a line without one (a continuation).

    ``line`` may carry the noise the module docstring lists; ``day`` dates a time-of-day prefix.
    """
    if line[:1] == "[" and "\x1b" not in line:  # the common case: skip the cleaning
        return _native(line.rstrip("\r\n"), day)
    text = clean(line)
    stripped = text.lstrip(" \t")
    if stripped[:1] == "[":
        return _native(stripped, day)
    m = _CUSTOM.match(stripped)
    return None if m is None else _stamped(m, Ranks(), stripped[m.end() :], day)


def _native(text: str, day: dt.date) -> PrefixedLine | None:
    m = _NATIVE.match(text)
    if m is None:
        bare = _RANKS_ONLY.match(text)
        if bare is None:
            return None
        return PrefixedLine(0.0, _ranks(" " + bare["tags"]), text[bare.end() :], dated=False, timed=False)
    return _stamped(m, _ranks(m["tags"]), text[m.end() :], day)


def _stamped(m: re.Match[str], ranks: Ranks, message: str, day: dt.date) -> PrefixedLine | None:
    dated = m["y"] is not None
    date = (m["y"], m["mo"], m["d"]) if dated else (str(day.year), str(day.month), str(day.day))
    seconds = _seconds(*date, m["h"], m["mi"], m["s"])
    if seconds is None:
        return None
    fraction = float(f"0.{m['ms']}") if m["ms"] else 0.0
    return PrefixedLine(seconds + fraction, ranks, message, dated)


@functools.lru_cache(maxsize=256)
def _seconds(y: str, mo: str, d: str, h: str, mi: str, s: str) -> float | None:
    """Unix seconds of a local time stamp (cached: a log repeats each second many times)."""
    try:  # the datetime constructor, not strptime: 20x cheaper, and replay reads millions of lines
        return dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)).timestamp()
    except ValueError:
        return None


def rank_tags(tags: str) -> Ranks:
    """The ranks of a prefix's tags (`` DP1 TP3``)."""
    return _ranks(tags)


@functools.lru_cache(maxsize=64)
def _ranks(tags: str) -> Ranks:
    if not tags:
        return Ranks()
    found = {name: int(num) for name, num in _TAG.findall(tags)}
    return Ranks(dp=found.get("DP", 0), tp=found.get("TP", 0), pp=found.get("PP", 0))

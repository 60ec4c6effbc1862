"""What a vLLM log line looks like: the prefix of every release, read into a Head.  Pure.

vLLM's logger (``vllm/logger.py``, ``_FORMAT`` and ``_DATE_FORMAT = "%m-%d %H:%M:%S"``) writes::

    INFO 01-03 16:21:03 logger.py:37] message                                  0.6 - 0.8 (V1 previews)
    INFO 10-31 10:40:43 [core.py:720] message                                  0.8 - 0.30.0
    (EngineCore_DP0 pid=4242) INFO 10-31 10:40:43 [core.py:720] message        0.31.0 - 0.34.0

Before 0.31 each vLLM process also wraps its stdout and stderr so that every physical line starts
with ``(<process> pid=<pid>) `` (``decorate_logs``); 0.31 moved that tag into the format itself.
A multi-line message repeats the whole prefix on each of its lines (``NewLineFormatter``).  A line
that lost its ``[`` (a paste, the old format) is read all the same.

**Process names of every generation**, and the rank each names (:func:`rank_of`):
``EngineCore_<n>`` (up to 0.10.1) and ``EngineCore_DP<n>`` (0.10.2 - 0.19) the scheduler of
data-parallel rank n, ``EngineCore`` (0.20+ without DP) rank 0, ``EngineCoreActor`` a Ray actor;
model runners ``VllmWorker TP<n>``, ``VllmWorker rank=<n>``, ``VllmWorker-<n>``, ``Worker_DP1_TP3_EP3``;
``APIServer`` and ``DPCoordinator`` are no rank's.

Tolerated around that (collectors' prefixes and ANSI are the line assembler's, already gone): a Ray
actor's own tag before vLLM's, and ``VLLM_LOGGING_PREFIX`` text before the level.  Nothing else may
stand before the level: a request's text that happens to hold a prefix is never read as one.  The
stamp has no year and no zone: it is read as local time in the year a :class:`Calendar` gives it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re

from poolwatch.sources.logfile.heads import Head, Ranks

__all__ = ["Calendar", "VllmReader", "message_of", "rank_of", "split_tag"]

_HEAD = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) "
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.\d{1,6})? \[?(?P<where>[^\]\s:\[]{1,200}:\d{1,7})\] ?"
)
_HEAD_WITHIN = 320  # the tags and VLLM_LOGGING_PREFIX before the level are at most this long
_PREFIX_TEXT = 40  # VLLM_LOGGING_PREFIX: at most this many characters, no quote
_TAG = re.compile(
    r"\((?P<proc>[\w.\-]{1,64}(?: [\w=.\-]{1,24}){0,2}) pid=(?P<pid>\d{1,10})(?:, ip=[\w.:\-]{1,64})?\) ?"
)
_ENGINE = re.compile(r"EngineCore(?:_(?:DP)?(?P<dp>\d{1,6}))?(?:Actor)?$")
_WORKER_TAGS = re.compile(r"(?<=[_ ])(DP|PP|TP|PCP|EP)(\d{1,6})")
_WORKER_RANK = re.compile(r"(?:rank=|-)(\d{1,6})$")
_HALF_YEAR = 6  # months: a stamp this far before the last one has crossed New Year


class Calendar:
    """Dates ``MM-DD HH:MM:SS`` stamps: the year of ``day`` (the year before for a stamp more than a
    day after ``day``), then one year on each time the month goes back by more than half a year."""

    def __init__(self, day: dt.date) -> None:
        self._day = day
        self._year: int | None = None
        self._month = 0

    def at(self, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
        """Unix seconds of the stamp, ``None`` for a date that does not exist."""
        if self._year is None:
            year = self._day.year
            late = (mo, d) > (self._day.month, self._day.day + 1)
            self._year = year - 1 if late else year
        elif mo < self._month - _HALF_YEAR:
            self._year += 1
        self._month = mo
        return _seconds(self._year, mo, d, h, mi, s)


class VllmReader:
    """Reads vLLM's prefix off a line (a :class:`Calendar` of ``day`` dates it; today's without one)."""

    dated = True  # a stamp always carries its date (the year is the calendar's)

    def __init__(self, day: dt.date | None = None) -> None:
        self._calendar = Calendar(day or dt.date.today())

    def read(self, line: str) -> Head | None:
        m = _HEAD.search(line, 0, _HEAD_WITHIN)
        if m is None:
            return None
        process, pid, before = _tags(line[: m.start()])
        if before is None:
            return None  # something other than tags and a short prefix stands before the level
        at = self._calendar.at(int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
        if at is None:
            return None
        message = line[m.end() :]
        key = (process, pid, m["level"], at, m["where"])
        return Head(at, message, process, rank_of(process), m["level"], m["where"], key)


def message_of(line: str) -> str | None:
    """The message of a line with vLLM's prefix (``None``: none), read without dating it."""
    m = _HEAD.search(line, 0, _HEAD_WITHIN)
    if m is None or _tags(line[: m.start()])[2] is None:
        return None
    return line[m.end() :]


def _tags(before: str) -> tuple[str, int, str | None]:
    """The last process tag in the text before the level, its pid, and what else stands there
    (``None`` when that is not a short logging prefix)."""
    process, pid, pos = "", 0, 0
    while (m := _TAG.match(before, pos)) is not None:
        process, pid, pos = m["proc"], int(m["pid"]), m.end()
    rest = before[pos:]
    if rest and (len(rest) > _PREFIX_TEXT or '"' in rest or "'" in rest):
        return process, pid, None
    return process, pid, rest


def split_tag(text: str) -> tuple[str | None, str]:
    """A line's last process tag (vLLM's own, after any Ray tag) and the text after it."""
    process, pos = None, 0
    while (m := _TAG.match(text, pos)) is not None:
        process, pos = m["proc"], m.end()
    return process, text[pos:]


@functools.lru_cache(maxsize=256)
def rank_of(process: str) -> Ranks | None:
    """The rank a process tag names: ``EngineCore_DP3`` / ``EngineCore_3`` dp 3, ``EngineCore`` (or a
    Ray ``EngineCoreActor``) dp 0, ``VllmWorker TP1`` / ``Worker_DP1_TP3_EP3`` their tensor and data
    ranks, anything else (the API server, a coordinator) ``None``."""
    engine = _ENGINE.match(process)
    if engine is not None:
        return Ranks(dp=int(engine["dp"] or 0))
    if not process.startswith(("VllmWorker", "Worker")):
        return None
    found = {name: int(n) for name, n in _WORKER_TAGS.findall(process)}
    rank = _WORKER_RANK.search(process)
    tp = found.get("TP", int(rank[1]) if rank else 0)
    return Ranks(dp=found.get("DP", 0), tp=tp, pp=found.get("PP", 0))


@functools.lru_cache(maxsize=256)
def _seconds(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
    try:
        return dt.datetime(y, mo, d, h, mi, s).timestamp()
    except ValueError:
        return None

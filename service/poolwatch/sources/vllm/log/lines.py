"""vLLM log lines as they look in production: the prefix of every release and the noise around it.  Pure.

vLLM's logger (``vllm/logger.py``, ``_FORMAT`` and ``_DATE_FORMAT = "%m-%d %H:%M:%S"``) writes::

    INFO 10-31 10:40:43 [core.py:720] message                                  0.10.2 - 0.30.0
    (EngineCore_DP0 pid=4242) INFO 10-31 10:40:43 [core.py:720] message        0.31.0 - 0.34.0

Before 0.31 each vLLM process also wraps its stdout and stderr so that every physical line starts
with ``(<process> pid=<pid>) `` in cyan (``decorate_logs``), so a log of any release shows the
process first; 0.31 moved that tag into the format itself (cyan only on a terminal).  Process
names: ``EngineCore_DP<n>`` (the scheduler of data-parallel rank n; every EngineCore up to 0.19,
with DP from 0.20), ``EngineCore`` (0.20+ without DP), ``APIServer``, ``Worker``/``VllmWorker-<n>``
(model runners), ``DPCoordinator``.  A multi-line message repeats the whole prefix on each of its
lines (``NewLineFormatter``), the line before each repeat ending in ``\\r``.

Tolerated around that: ANSI colour codes, ``\\r`` line ends, NUL bytes left by ``copytruncate``, an
ISO timestamp with a level or a CRI stream tag in front (``2025-10-31T10:40:43.1Z stdout F ``), a
Ray actor's own ``(EngineCoreActor pid=N, ip=10.0.0.2) `` tag before vLLM's, and any
``VLLM_LOGGING_PREFIX`` text before the level.  The stamp has no year and no zone: it is read as
local time in the year a :class:`Calendar` gives it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass

__all__ = ["Calendar", "VllmLine", "clean", "parse_line", "rank_of", "split_tag"]

_HEAD = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) "
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d) \[(?P<where>[^\]\s:]{1,200}:\d{1,7})\] ?"
)
_HEAD_WITHIN = 320  # the prefix (a Ray tag, vLLM's tag, VLLM_LOGGING_PREFIX) is at most this long
_TAG = re.compile(r"\((?P<proc>[\w.\-]{1,64}) pid=(?P<pid>\d{1,10})(?:, ip=[\w.:\-]{1,64})?\) ?")
_LEAD = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})? "
    r"(?:(?:stdout|stderr) [FP] |(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +)?"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]?")
_DP = re.compile(r"_DP(\d{1,6})$")
_HALF_YEAR = 6  # months: a stamp this far before the last one has crossed New Year


@dataclass(frozen=True, slots=True)
class VllmLine:
    """A line that starts one log record."""

    at: float  # unix seconds
    process: str  # "EngineCore_DP0", "APIServer", ... ("" when no tag is shown)
    pid: int
    level: str
    where: str  # "core.py:720"
    message: str
    continued: bool = False  # the line ended in "\r": the next line repeats the prefix to go on

    @property
    def key(self) -> tuple[str, int, str, float, str]:
        """What the lines of one multi-line record share."""
        return (self.process, self.pid, self.level, self.at, self.where)


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


@functools.lru_cache(maxsize=256)
def _seconds(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
    try:
        return dt.datetime(y, mo, d, h, mi, s).timestamp()
    except ValueError:
        return None


def clean(line: str) -> str:
    """The line without its line end, NULs, ANSI codes and an ISO / CRI lead (spaces kept)."""
    line = line.rstrip("\n").rstrip("\r").lstrip("\x00")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line[:1] == "2":
        m = _LEAD.match(line)
        if m is not None:
            line = line[m.end() :]
    return line


def split_tag(text: str) -> tuple[str | None, str]:
    """A cleaned line's last process tag (vLLM's own, after any Ray tag) and the text after it."""
    process, pos = None, 0
    while (m := _TAG.match(text, pos)) is not None:
        process, pos = m["proc"], m.end()
    return process, text[pos:]


def parse_line(line: str, calendar: Calendar) -> VllmLine | None:
    """The prefix of a raw line, or ``None`` for a line without one (a continuation)."""
    continued = line.rstrip("\n").endswith("\r")
    text = clean(line)
    m = _HEAD.search(text, 0, _HEAD_WITHIN)
    if m is None:
        return None
    at = calendar.at(int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
    if at is None:
        return None
    before = text[: m.start()]
    tags = list(_TAG.finditer(before))
    process, pid = (tags[-1]["proc"], int(tags[-1]["pid"])) if tags else ("", 0)
    return VllmLine(at, process, pid, m["level"], m["where"], text[m.end() :], continued)


def rank_of(process: str) -> int | None:
    """The data-parallel rank a process tag names: ``EngineCore_DP3`` -> 3, ``EngineCore`` (or a Ray
    ``EngineCoreActor`` without vLLM's own tag) -> 0, anything else (the API server, a worker) -> ``None``."""
    if "EngineCore" not in process:
        return None
    m = _DP.search(process)
    return int(m[1]) if m else 0

"""An engine's own line prefix, read: who wrote the line, when, at what level, from where.  Pure.

Every engine's dialect (its sources room) reads its prefix into a :class:`Head`: SGLang's
``[2025-10-31 10:40:43 DP1 TP3]``, vLLM's ``(EngineCore_DP0 pid=12) ERROR 10-31 10:40:43
[core.py:720]``.  A line without one is a continuation (a traceback frame, the second line of a
report).  The neutral stages (:mod:`~poolwatch.sources.logfile.assembler`,
:mod:`~poolwatch.sources.logfile.records`) read nothing else of an engine's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Head", "HeadReader", "Ranks"]


@dataclass(frozen=True, slots=True, order=True)
class Ranks:
    """The data-, tensor- and pipeline-parallel rank a line came from (0 when not shown)."""

    dp: int = 0
    tp: int = 0
    pp: int = 0

    def label(self) -> str:
        return f"dp{self.dp}-tp{self.tp}-pp{self.pp}"


# one per line: not frozen, which costs five times as much to build (benchmarks/bench_replay.py);
# never changed once made
@dataclass(slots=True)
class Head:
    """The prefix of a line that starts a message, and the message after it."""

    at: float | None  # unix seconds; None: the prefix shows no time (the record takes the last one)
    message: str
    stream: str = ""  # who writes it: records of different writers never mix (vLLM's process tag)
    ranks: Ranks | None = None  # the scheduler rank it names; None: a process that is no rank's
    level: str = ""  # "ERROR", ... ("" when the prefix shows none)
    where: str = ""  # the source file and line, "core.py:720" ("" when the prefix shows none)
    key: tuple[object, ...] = ()  # what the lines of one message repeat (a dialect that repeats its prefix)
    dated: bool = True  # False: a time of day without a date (``at`` is on the reader's day)

    @property
    def source_file(self) -> str:
        """The file part of ``where`` (``core.py``), "" when none is shown."""
        return self.where.rpartition(":")[0].rpartition("/")[2]


class HeadReader(Protocol):
    """Reads an engine's prefix off a line; stateful where the dialect's stamps need it (a year a
    stamp does not carry, a day a time of day does not)."""

    @property
    def dated(self) -> bool:
        """Whether the times read so far carry a date."""
        ...

    def read(self, line: str) -> Head | None:
        """The line's prefix and message, ``None`` for a line without the engine's prefix."""
        ...

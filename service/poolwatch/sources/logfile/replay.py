"""A replayed log's timeline and report, the same for every engine's log (``poolwatch replay``).

The replayer (:mod:`~poolwatch.sources.logfile.replayer`) feeds a saved log's lines through the same
stages as the live log source and emits :class:`Row` values in time order: one per incident, start
or note, and the batch lines of one rank summarised over a window.  The :class:`ReplayReport` counts
what was read (and what the line assembler joined, split and dropped) and keeps the *first
problem*: the earliest moment the accounting provably went wrong, or the first pool error the
engine named.  Pure data.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.sources.logfile.assembler import AssemblyStats
from poolwatch.sources.logfile.events import PoolError

__all__ = ["POOLS", "UNATTRIBUTED", "UNDATED_DAY", "Problem", "ReplayReport", "Row", "Windows"]

POOLS = (Pool.FULL, Pool.SWA, Pool.MAMBA, Pool.REQ)  # the timeline's pool columns
UNDATED_DAY = dt.date(2000, 1, 1)  # the day a log's time-of-day lines are put on when nothing dates them


@dataclass(slots=True)
class Row:
    """One line of the timeline: one event, or the batches of one rank in one window."""

    at: float
    rank: str
    event: str  # "prefill", "decode", "batches" (a window of several), or an incident kind
    batches: int = 0
    figures: dict[Pool, str] = field(default_factory=dict)  # used count, else the usage ratio
    running: int | None = None
    waiting: int | None = None
    verdict: str = ""  # what the figures prove ("" when they prove nothing)
    dated: bool = True  # False: the log gave a time of day only (``at`` is on an arbitrary day)
    error: PoolError | None = None  # the pool error the line names (class, bugs)
    weights: dict[Pool, tuple[bool, bool, float]] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Problem:
    at: float
    rank: str
    event: str
    verdict: str
    message: str
    dated: bool = True
    error: str = ""  # the pool error it names, described (class, pool, bugs)


UNATTRIBUTED = "unattributed"  # the rank shown for an orphan block's incident


@dataclass(slots=True)
class ReplayReport:
    lines: int = 0
    records: int = 0
    recognised: int = 0  # records that said something in one of the engine's known formats
    split_records: int = 0  # records cut in two at the record bound
    cut_tail: int = 0  # bytes of an unterminated last line, never parsed
    ranks: set[str] = field(default_factory=set)
    incidents: dict[str, int] = field(default_factory=dict)
    unattributed: int = 0  # incidents in orphan blocks (rank header before the excerpt): no rank
    damaged: int = 0  # batch lines whose start was damaged, read by their items
    damaged_unread: int = 0  # ... of those, the ones no rank could be read for (not folded)
    first_problem: Problem | None = None
    errors: dict[str, int] = field(default_factory=dict)  # pool errors named, by class
    marked: int = 0  # lines among the first read that carry the engine's own marks (set by the caller)
    assembly: AssemblyStats = field(default_factory=AssemblyStats)  # what the line assembler did

    @property
    def problem(self) -> bool:
        return self.first_problem is not None or IncidentKind.SCHEDULER_EXCEPTION.value in self.incidents


class Windows:
    """The rows of the current window, emitted in time order when it closes: per rank one summary
    row (its batch or statistics lines over ``every`` seconds) and every other row as it came.
    With ``every <= 0`` each row is emitted at once (:attr:`each`)."""

    def __init__(self, emit: Callable[[Row], None], every: float) -> None:
        self.emit, self.every = emit, every
        self.summary: dict[str, Row] = {}  # the current window's summary row, by rank
        self.rows: list[Row] = []  # the current window's other rows
        self._window: float | None = None

    @property
    def each(self) -> bool:
        return self.every <= 0

    def advance(self, at: float) -> None:
        """A line stamped ``at`` was read: close the window when ``at`` is past it."""
        if self.each:
            return
        window = math.floor(at / self.every)
        if self._window is not None and window != self._window:
            self.close()
        self._window = window

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if self.each:
            self.close()

    def close(self) -> None:
        for row in sorted([*self.summary.values(), *self.rows], key=lambda r: (r.at, r.rank)):
            self.emit(row)
        self.summary.clear()
        self.rows.clear()

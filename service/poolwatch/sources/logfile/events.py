"""What an engine's log says, in words every engine's dialect shares.  Pure data.

An engine's dialect (its sources room) turns each record of its log into these events; the neutral
fold (:mod:`~poolwatch.sources.logfile.fold`) turns them into snapshots and the replayer
(:mod:`~poolwatch.sources.logfile.replayer`) into a timeline:

* :class:`Figures` -- a batch or statistics line: used counts, usage ratios, queue lengths;
* :class:`PoolSize` -- a startup line naming a pool's size (it may start a new boot of the server);
* :class:`Start` -- one rank's engine starting (a new boot of that rank), with its release;
* :class:`Note` -- a line worth a row on the timeline and nothing else (a capacity in tokens, a
  fault-tolerance status);
* :class:`RankIncident` -- a leak report, a failed check, a crash: an incident, with the pool
  error it names (:class:`PoolError`) when the dialect knows one; ``ranks`` is ``None`` for an
  orphan block, whose rank no line proves;
* :class:`Dead` -- another process's word that a rank died (counted once per death).

Pool errors are named by class (:class:`ErrorClass`) and, where a known bug matches, by the bug's
id in ``/work/shared/bug-zoo.md`` (``S07``, ``V01``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.model.rank import Pool, Role
from poolwatch.model.snapshot import Incident
from poolwatch.sources.logfile.heads import Ranks

__all__ = [
    "Dead",
    "ErrorClass",
    "Figures",
    "LogEvent",
    "Note",
    "PoolError",
    "PoolSize",
    "RankIncident",
    "Start",
]


class ErrorClass(enum.StrEnum):
    """What a pool error is, whatever the engine."""

    DOUBLE_FREE = "double free"  # a slot or block counted free twice (a surplus, an early free)
    LEAK = "leak"  # slots nobody owns any more (a deficit)
    COUNTER = "counter"  # a counter that cannot be right (negative, above the pool): no sign proven
    STRANDED = "stranded"  # slots held by a request that is gone or will never be read
    STALL = "stall"  # requests queued, nothing served: the pool cannot hand out what it holds


@dataclass(frozen=True, slots=True)
class PoolError:
    """A pool error a log line names: its class, the pool, what was seen and the bugs it matches."""

    cls: ErrorClass
    what: str  # one line for people: "vLLM's own block-pool check failed"
    pool: Pool | None = None
    bugs: tuple[str, ...] = ()  # bug-zoo ids it may be ("V01", "O11"), the likeliest first
    proven: bool = True  # False: a sign worth a row that proves no fault on its own (stranded at reset)

    def describe(self) -> str:
        pool = f" ({self.pool.value})" if self.pool is not None else ""
        bugs = f"; matches {', '.join(self.bugs)}" if self.bugs else ""
        return f"{self.cls.value}{pool}: {self.what}{bugs}"


# one per line: not frozen, which costs five times as much to build (benchmarks/bench_replay.py);
# never changed once made
@dataclass(slots=True)
class Figures:
    """One batch or statistics line."""

    at: float
    ranks: Ranks | None  # None: no one rank's (vLLM's "N Engines Aggregated" line)
    kind: str  # "prefill", "decode", "batch" (kind unknown), "stats"
    used: Mapping[Pool, int] = field(default_factory=dict)
    usage: Mapping[Pool, float] = field(default_factory=dict)  # as printed: a ratio, or percent
    negative: frozenset[Pool] = frozenset()  # usages printed with a leading "-": a surplus of >= 1
    queues: Mapping[str, int] = field(default_factory=dict)
    percent: bool = False  # the usage is printed in percent (vLLM), else as a ratio (SGLang)
    busy: bool = True  # the engine prints the line only while it runs a batch (else: busy if queued)
    throughput: float | None = None  # tokens/s over the line's interval (None: not printed)
    role: Role | None = None  # a PD role the line's fields reveal
    iteration: int | None = None
    damaged: bool = False  # its prefix was damaged: read by its fields alone


@dataclass(frozen=True, slots=True)
class PoolSize:
    at: float
    ranks: Ranks
    pool: Pool
    size: int
    boot: bool = False  # the line starts a new boot of the whole server (SGLang's first startup line)


@dataclass(frozen=True, slots=True)
class Start:
    at: float
    ranks: Ranks
    release: str


@dataclass(frozen=True, slots=True)
class Note:
    """A line worth a timeline row: a capacity in tokens, a status, a pool error that pages no one."""

    at: float
    ranks: Ranks | None
    text: str
    error: PoolError | None = None  # a pool error the line names that proves no fault alone (stranded)


@dataclass(frozen=True, slots=True)
class RankIncident:
    ranks: Ranks | None  # None: an orphan block, no line proves its rank (never rank 0's)
    incident: Incident
    error: PoolError | None = None
    decode_drops: frozenset[Pool] = (
        frozenset()
    )  # pools whose figures a PD decode worker's check states partly


@dataclass(frozen=True, slots=True)
class Dead:
    at: float
    ranks: Ranks | None  # None: the line names no rank (rank 0 unless a death is already known)
    message: str


LogEvent = Figures | PoolSize | Start | Note | RankIncident | Dead

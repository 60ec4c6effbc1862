"""One source's account of one rank at one moment: the snapshot, the probe's health and the
incidents a log reported."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from poolwatch.model.findings import Repair, Tripwire
from poolwatch.model.holds import Hold
from poolwatch.model.progress import Progress
from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, WorkerId
from poolwatch.model.witness import CounterWitness

_T = TypeVar("_T")

__all__ = ["Incident", "ProbeHealth", "Snapshot"]


@dataclass(frozen=True, slots=True)
class Incident:
    """A line in a worker's log that says the accounting failed or the scheduler died."""

    kind: IncidentKind
    message: str
    at: float  # unix seconds (the log line's timestamp when it has one)
    pools: tuple[PoolAccount, ...] = ()  # figures parsed out of a leak message


@dataclass(frozen=True, slots=True)
class ProbeHealth:
    """The in-process probe's account of itself."""

    samples_total: int = 0
    errors_total: int = 0
    last_error: str = ""
    sample_cost_seconds: float = 0.0  # last cheap sample, scheduler-thread time
    census_cost_seconds: float = 0.0  # last identity census
    census_total: int = 0
    disabled: bool = False  # kill switch engaged, or the probe gave up
    tripwires_dropped: int = 0  # findings not kept because the tripwire log was full
    guard: bool = False  # the opt-in guard may repair free lists (POOLWATCH_PROBE_GUARD=1)
    guard_return: bool = False  # ... including "return" (off on releases newer than the newest known)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one source knows about one rank at one moment."""

    worker: WorkerId
    seq: int  # scheduler iteration (probe) or a source's own counter
    taken_at: float  # unix seconds
    phase: Phase
    pools: Mapping[Pool, PoolAccount]
    source: str  # a SourceKind value
    queues: Mapping[str, int] = field(default_factory=dict)
    tripwires: tuple[Tripwire, ...] = ()
    incidents: tuple[Incident, ...] = ()  # seen since this source's previous snapshot
    probe: ProbeHealth | None = None
    idle_check_strict: bool | None = None  # SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE
    boot_id: str = ""  # changes when the scheduler restarts (seq resets)
    repairs: tuple[Repair, ...] = ()  # the guard's actions (probe with POOLWATCH_PROBE_GUARD=1)
    final: bool = False  # the probe's last word: SGLang's idle check is about to crash this rank
    holds: tuple[Hold, ...] = ()  # capacity held by owners waiting on something (model/holds.py)
    progress: Progress | None = None  # whether the scheduler moves its queue (model/progress.py)
    # the engine counters the probe's census disagrees with (the pools' figures are the census's then)
    witnesses: tuple[CounterWitness, ...] = ()
    # what is derived from these figures (the pools' findings), computed once per snapshot
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key: str, compute: Callable[[], _T]) -> _T:
        """``compute()`` the first time ``key`` is asked of this snapshot, the same value after:
        every consumer (exporter, detector, API, check, the probe's long-poll) shares one
        assessment.  A ``replace()``-d snapshot starts with an empty memo."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: _T = self._memo[key]
        return value

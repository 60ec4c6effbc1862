"""Folding vLLM log events into per-rank snapshots (shared by the live log source and replay).

A rank is one EngineCore (its data-parallel index; ``dp<n>-tp0-pp0`` as the probe names it).  A
statistics line gives a snapshot with the ``running`` / ``waiting`` queues and the block pool's
usage sign: busy while a request runs or waits, never idle (see :mod:`poolwatch.sources.vllm.metrics`
for why an idle vLLM proves nothing), no pool size (the log gives the capacity in tokens only) and
no used count except ``-1`` for a usage printed below zero (a surplus of at least one block).  A
crash gives a snapshot carrying its incident.  ``Initializing a V1 LLM engine (vX)`` starts a new
boot of that rank (a new ``boot_id``; its sequence numbers restart) and names its release.

The API server's account of a dead engine becomes an incident only for a rank not already known
dead (EngineCore's own fatal error came first, or an earlier client line); a line that names no
engine stands for rank 0.  The "N Engines Aggregated" statistics line is no rank's.

Bounded: one log names at most ``max_ranks`` ranks (the index is text anyone who can write the log
controls); lines of further ranks are dropped and counted (:attr:`VllmLogFold.dropped`).
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, Role, SourceKind, WorkerId
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sources.vllm.log.events import EngineDead, LogEvent, RankIncident, Startup, Stats

__all__ = ["ENGINE", "SOURCE", "VllmLogFold", "rank_label", "stats_snapshot_pools"]

ENGINE = "vllm"
SOURCE = SourceKind.of(ENGINE, "log")


def rank_label(dp: int) -> str:
    """The rank part of a worker key (``WorkerId.key``) for an engine index."""
    return f"dp{dp}-tp0-pp0"


@dataclass(slots=True)
class _RankLog:
    seq: int = 0
    boot_id: str = ""
    release: str = ""
    dead: bool = False  # a crash was read since its last start


def stats_snapshot_pools(event: Stats) -> dict[Pool, PoolAccount]:
    """The block pool a statistics line shows: size unknown, used only when printed below zero."""
    used = -1 if event.figures.negative else None
    return {Pool.FULL: PoolAccount(Pool.FULL, None, used=used)}


class VllmLogFold:
    """Turns the events of one server's log into snapshots, remembering each rank's boot and release."""

    def __init__(
        self, worker: str, role: Role = Role.UNIFIED, instance: str = "", max_ranks: int = 1024
    ) -> None:
        self._worker = worker
        self._role = role
        self._instance = instance
        self.max_ranks = max_ranks
        self.dropped = 0  # events of ranks past the cap (never folded)
        self._ranks: dict[int, _RankLog] = {}

    def apply(self, event: LogEvent) -> Snapshot | None:
        """The snapshot this event makes of its rank (``None``: nothing to show)."""
        if isinstance(event, Startup):
            state = self._rank(event.dp)
            if state is not None:
                state.seq, state.boot_id, state.release = 0, f"log@{event.at:.0f}", event.release
                state.dead = False
            return None
        if isinstance(event, Stats):
            return None if event.dp is None else self._stats(event.dp, event)
        if isinstance(event, RankIncident):
            return self._incident(event.dp, event.incident)
        if isinstance(event, EngineDead):
            return self._client_dead(event)
        return None  # capacity and fault-tolerance status: the timeline shows them

    def _stats(self, dp: int, event: Stats) -> Snapshot | None:
        state = self._rank(dp)
        if state is None:
            return None
        f = event.figures
        queues = {q: n for q, n in (("running", f.running), ("waiting", f.waiting)) if n is not None}
        phase = Phase.BUSY if any(queues.values()) else Phase.UNKNOWN
        return self._snapshot(state, dp, event.at, phase, stats_snapshot_pools(event), queues, ())

    def _incident(self, dp: int, incident: Incident) -> Snapshot | None:
        state = self._rank(dp)
        if state is None:
            return None
        state.dead = True
        return self._snapshot(state, dp, incident.at, Phase.UNKNOWN, {}, {}, (incident,))

    def _client_dead(self, event: EngineDead) -> Snapshot | None:
        dp = 0 if event.dp is None else event.dp
        known = self._ranks.get(dp)
        if (known is not None and known.dead) or (
            event.dp is None and any(r.dead for r in self._ranks.values())
        ):
            return None  # EngineCore said so itself, or the API server already did
        said = f"EngineCore died (seen by the API server): {event.message}"
        return self._incident(dp, Incident(IncidentKind.SCHEDULER_EXCEPTION, said, event.at))

    def _rank(self, dp: int) -> _RankLog | None:
        state = self._ranks.get(dp)
        if state is None:
            if len(self._ranks) >= self.max_ranks:
                self.dropped += 1
                return None
            state = self._ranks[dp] = _RankLog()
        return state

    def _snapshot(
        self,
        state: _RankLog,
        dp: int,
        at: float,
        phase: Phase,
        pools: dict[Pool, PoolAccount],
        queues: dict[str, int],
        incidents: tuple[Incident, ...],
    ) -> Snapshot:
        state.seq += 1
        worker = WorkerId(
            self._worker, self._role, dp, release=state.release, instance=self._instance, engine=ENGINE
        )
        return Snapshot(
            worker=worker,
            seq=state.seq,
            taken_at=at,
            phase=phase,
            pools=pools,
            source=SOURCE,
            queues=queues,
            incidents=incidents,
            boot_id=state.boot_id,
        )

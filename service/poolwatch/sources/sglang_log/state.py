"""Folding SGLang log events into per-rank snapshots (shared by the live log source and replay).

A log only speaks at batch events, so a log snapshot is coarse and never *idle*: a batch line
gives a busy rank's used counts (decode) or the sign of its usage ratios (prefill).  The one
exception is SGLang's own leak report, whose figures were read by its idle check at one loop
boundary: that snapshot is exact and idle (except the request-slot figures of a PD decode
worker, which leave out its pre-allocated rows).  Pool sizes come from the startup lines; the
``max_total_num_tokens=`` line also marks a scheduler (re)start, i.e. a new ``boot_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from poolwatch.model import (
    Incident,
    IncidentKind,
    Phase,
    Pool,
    PoolAccount,
    Role,
    Snapshot,
    SourceKind,
    WorkerId,
)
from poolwatch.sources.sglang_log.events import (
    BatchStats,
    Capacity,
    LogEvent,
    RankIncident,
    UnattributedIncident,
)
from poolwatch.sources.sglang_log.lines import Ranks

__all__ = ["LogFold", "SOURCE"]

SOURCE = SourceKind.SGLANG_LOG


BOOT_WINDOW = 120.0  # startup lines this close together belong to one start of the server


@dataclass(slots=True)
class _RankLog:
    seq: int = 0
    boot_id: str = ""
    sizes: dict[Pool, int] = field(default_factory=dict)


class LogFold:
    """Turns the events of one server's log into snapshots, remembering sizes, role and boots.

    The ranks of one log are one server: they share its role (seen on any rank's batch lines)
    and its boots (the first startup line of a start names the boot; every rank's sequence
    numbers restart with it).
    """

    def __init__(self, worker: str, role: Role = Role.UNIFIED, instance: str = "") -> None:
        self._worker = worker
        self._role = role
        self._instance = instance
        self._seen_role: Role | None = None
        self._boot_id = ""
        self._boot_at: float | None = None
        self._ranks: dict[Ranks, _RankLog] = {}
        self._sizes: dict[Pool, int] = {}  # latest size of any rank: TP ranks share bookkeeping
        self.unattributed: list[Incident] = []  # orphan blocks' incidents, no rank proven (last 16)
        self.unattributed_total = 0

    def apply(self, event: LogEvent) -> Snapshot | None:
        """The snapshot this event makes of its rank (``None`` for a startup line)."""
        if isinstance(event, Capacity):
            self._capacity(event)
            return None
        if isinstance(event, UnattributedIncident):  # held apart: never rank 0's by default
            self.unattributed = [*self.unattributed[-15:], event.incident]
            self.unattributed_total += 1
            return None
        state = self._rank(event.ranks)
        state.seq += 1
        if isinstance(event, BatchStats):
            self._seen_role = event.role or self._seen_role
            pools = self._batch_pools(state, event)
            return self._snapshot(state, event.ranks, event.at, Phase.BUSY, pools, event.queues, ())
        return self._incident_snapshot(state, event)

    def detached(self, event: UnattributedIncident) -> Snapshot:
        """What an orphan block's figures say, for a verdict only (``poolwatch replay``): rank 0
        stands in for the unknown rank, so this snapshot is never folded, stored or published."""
        return self._incident_snapshot(_RankLog(), RankIncident(Ranks(), event.incident))

    def note_role(self, role: Role) -> None:
        """A PD role revealed by a line that is not folded into a snapshot (replay skips those)."""
        self._seen_role = role

    def _rank(self, ranks: Ranks) -> _RankLog:
        state = self._ranks.setdefault(ranks, _RankLog())
        if state.boot_id != self._boot_id:
            state.boot_id, state.seq = self._boot_id, 0
        return state

    def _capacity(self, event: Capacity) -> None:
        if event.pool is Pool.FULL and (self._boot_at is None or event.at - self._boot_at > BOOT_WINDOW):
            self._boot_id, self._boot_at = f"log@{event.at:.0f}", event.at
        self._rank(event.ranks).sizes[event.pool] = event.size
        self._sizes[event.pool] = event.size

    def _size(self, state: _RankLog, pool: Pool) -> int | None:
        return state.sizes.get(pool, self._sizes.get(pool))

    def _batch_pools(self, state: _RankLog, event: BatchStats) -> dict[Pool, PoolAccount]:
        pools: dict[Pool, PoolAccount] = {}
        for pool in sorted({*event.used, *event.usage, *event.negative}, key=list(Pool).index):
            used = event.used.get(pool)
            if used is None and pool in event.negative:
                used = -1  # "-0.00": a surplus of at least one slot; the ratio hides the rest
            pools[pool] = PoolAccount(pool, self._size(state, pool), used=used)
        return pools

    def _incident_snapshot(self, state: _RankLog, event: RankIncident) -> Snapshot:
        incident = self._trusted(event.incident)
        pools = {a.pool: a for a in incident.pools}
        phase = Phase.UNKNOWN
        if pools:
            phase = Phase.BUSY if incident.kind is IncidentKind.BUSY_CHECK_FAILED else Phase.IDLE
        return self._snapshot(state, event.ranks, incident.at, phase, pools, {}, (incident,))

    def _trusted(self, incident: Incident) -> Incident:
        """On a PD decode worker SGLang checks its request-slot pool against size plus the
        pre-allocated rows but prints only the size (0.5.0+): those figures give neither the sign
        nor the size of the fault, so they are dropped (the report itself still counts)."""
        if self._current_role() is not Role.DECODE or all(a.pool is not Pool.REQ for a in incident.pools):
            return incident
        return replace(incident, pools=tuple(a for a in incident.pools if a.pool is not Pool.REQ))

    def _current_role(self) -> Role:
        return self._role if self._role is not Role.UNIFIED else (self._seen_role or Role.UNIFIED)

    def _snapshot(
        self,
        state: _RankLog,
        ranks: Ranks,
        at: float,
        phase: Phase,
        pools: dict[Pool, PoolAccount],
        queues: Mapping[str, int],
        incidents: tuple[Incident, ...],
    ) -> Snapshot:
        worker = WorkerId(
            self._worker, self._current_role(), ranks.dp, ranks.tp, ranks.pp, instance=self._instance
        )
        return Snapshot(
            worker=worker,
            seq=state.seq,
            taken_at=at,
            phase=phase,
            pools=pools,
            source=SOURCE,
            queues=dict(queues),
            incidents=incidents,
            boot_id=state.boot_id,
        )

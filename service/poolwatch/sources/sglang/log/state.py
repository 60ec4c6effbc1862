"""Folding SGLang log events into per-rank snapshots (shared by the live log source and replay).

A log only speaks at batch events, so a log snapshot is coarse and never *idle*: a batch line
gives a busy rank's used counts (decode) or the sign of its usage ratios (prefill).  The one
exception is SGLang's own leak report, whose figures were read by its idle check at one loop
boundary: that snapshot is exact and idle (except the request-slot figures of a PD decode
worker, which leave out its pre-allocated rows).  Pool sizes come from the startup lines; the
``max_total_num_tokens=`` line also marks a scheduler (re)start, i.e. a new ``boot_id``.

Bounded: one log names at most ``max_ranks`` ranks at a time (``TP<n>`` tags are text anyone who
can write the log controls).  A new rank past the cap takes the place of the one silent longest
if that one has been silent for :data:`RANK_IDLE_S` of log time, else its lines are dropped and
counted (:attr:`LogFold.dropped`); a new boot forgets every rank of the previous one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, Role, SourceKind, WorkerId
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sources.sglang.log.events import (
    BatchStats,
    Capacity,
    LogEvent,
    RankIncident,
    UnattributedIncident,
)
from poolwatch.sources.sglang.log.lines import Ranks

__all__ = ["LogFold", "SOURCE"]

SOURCE = SourceKind.of("sglang", "log")


BOOT_WINDOW = 120.0  # startup lines this close together belong to one start of the server
RANK_IDLE_S = 600.0  # at the cap, a rank silent this long (log time) gives its place to a new one


@dataclass(slots=True)
class _RankLog:
    seq: int = 0
    boot_id: str = ""
    sizes: dict[Pool, int] = field(default_factory=dict)
    last_at: float = 0.0


class LogFold:
    """Turns the events of one server's log into snapshots, remembering sizes, role and boots.

    The ranks of one log are one server: they share its role (seen on any rank's batch lines)
    and its boots (the first startup line of a start names the boot; every rank's sequence
    numbers restart with it).
    """

    def __init__(
        self, worker: str, role: Role = Role.UNIFIED, instance: str = "", max_ranks: int = 1024
    ) -> None:
        self._worker = worker
        self.max_ranks = max_ranks
        self.dropped = 0  # events of ranks past the cap (never folded)
        self._role = role
        self._instance = instance
        self._seen_role: Role | None = None
        self._boot_id = ""
        self._boot_at: float | None = None
        self._ranks: OrderedDict[Ranks, _RankLog] = OrderedDict()  # least recently heard first
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
        at = event.at if isinstance(event, BatchStats) else event.incident.at
        state = self._rank(event.ranks, at)
        if state is None:
            return None
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

    def _rank(self, ranks: Ranks, at: float) -> _RankLog | None:
        """The rank's state (``None``: a new rank past the cap, its event dropped)."""
        state = self._ranks.get(ranks)
        if state is None:
            if len(self._ranks) >= self.max_ranks:
                oldest = next(iter(self._ranks.values()))
                if at - oldest.last_at < RANK_IDLE_S:
                    self.dropped += 1
                    return None
                self._ranks.popitem(last=False)
            state = self._ranks[ranks] = _RankLog()
        self._ranks.move_to_end(ranks)
        state.last_at = max(state.last_at, at)
        if state.boot_id != self._boot_id:
            state.boot_id, state.seq = self._boot_id, 0
        return state

    def _capacity(self, event: Capacity) -> None:
        if event.pool is Pool.FULL and (self._boot_at is None or event.at - self._boot_at > BOOT_WINDOW):
            self._boot_id, self._boot_at = f"log@{event.at:.0f}", event.at
            self._ranks = OrderedDict()  # a new start: the previous one's ranks are gone
        state = self._rank(event.ranks, event.at)
        if state is not None:
            state.sizes[event.pool] = event.size
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
            self._worker,
            self._current_role(),
            ranks.dp,
            ranks.tp,
            ranks.pp,
            instance=self._instance,
            engine=SOURCE.engine,
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

"""Folding an engine's log events into per-rank snapshots (the live log source and replay share it).

A log speaks only at events, so a log snapshot is coarse and never *idle*: a batch or statistics
line gives a busy rank's used counts, or only the sign of a usage printed below zero (``-0.00``,
``-0.0%``: a surplus of at least one slot).  The one exception is an engine's own leak report,
whose figures its idle check read at one loop boundary: that snapshot is exact and idle (the
dialect drops the figures a PD decode worker's check states only in part, ``decode_drops``).

Boots: a startup line may start a new boot of the whole server (``PoolSize.boot``: every rank of the
previous boot is forgotten) or of one rank (``Start``: that rank's sequence numbers restart and it
takes the release the line names).  Deaths: a crash marks its rank dead until it starts again;
another process's word that a rank died (``Dead``) becomes an incident only for a rank not already
known dead (a line naming no rank stands for rank 0, unless some rank is known dead).

Bounded: one log names at most ``max_ranks`` ranks at a time (rank tags are text anyone who can
write the log controls).  A new rank past the cap takes the place of the one silent longest if that
one has been silent for :data:`RANK_IDLE_S` of log time, else its events are dropped and counted
(:attr:`LogFold.dropped`).  Orphan blocks' incidents (no rank proven) are held apart, never rank 0's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, Role, SourceKind, WorkerId
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sources.logfile.events import Dead, Figures, LogEvent, PoolSize, RankIncident, Start
from poolwatch.sources.logfile.heads import Ranks

__all__ = ["BOOT_WINDOW", "RANK_IDLE_S", "LogFold"]

BOOT_WINDOW = 120.0  # startup lines this close together belong to one start of the server
RANK_IDLE_S = 600.0  # at the cap, a rank silent this long (log time) gives its place to a new one
_KEEP_UNATTRIBUTED = 16


@dataclass(slots=True)
class _RankLog:
    seq: int = 0
    boot_id: str = ""
    release: str = ""
    dead: bool = False  # a crash was read since its last start
    sizes: dict[Pool, int] = field(default_factory=dict)
    last_at: float = 0.0


class LogFold:
    """Turns the events of one server's log into snapshots, remembering sizes, role, boots and deaths.

    The ranks of one log are one server: they share its role (seen on any rank's lines)."""

    def __init__(
        self,
        worker: str,
        role: Role = Role.UNIFIED,
        instance: str = "",
        max_ranks: int = 1024,
        *,
        engine: str,
        source: SourceKind,
    ) -> None:
        self._worker, self._role, self._instance = worker, role, instance
        self._engine, self._source = engine, source
        self.max_ranks = max_ranks
        self.dropped = 0  # events of ranks past the cap (never folded)
        self._seen_role: Role | None = None
        self._boot_id = ""
        self._boot_at: float | None = None
        self._ranks: OrderedDict[Ranks, _RankLog] = OrderedDict()  # least recently heard first
        self._sizes: dict[Pool, int] = {}  # latest size of any rank: TP ranks share bookkeeping
        self.unattributed: list[Incident] = []  # orphan blocks' incidents (the last 16)
        self.unattributed_total = 0

    def apply(self, event: LogEvent) -> Snapshot | None:
        """The snapshot this event makes of its rank (``None``: nothing to show)."""
        if isinstance(event, PoolSize):
            self._pool_size(event)
        elif isinstance(event, Start):
            self._start(event)
        elif isinstance(event, Figures):
            return self._figures(event)
        elif isinstance(event, RankIncident):
            return self._incident(event)
        elif isinstance(event, Dead):
            return self._dead(event)
        return None  # a note: the timeline shows it

    def detached(self, event: RankIncident) -> Snapshot:
        """What an orphan block's figures say, for a verdict only (``poolwatch replay``): rank 0
        stands in for the unknown rank, so this snapshot is never folded, stored or published."""
        pools = self._trusted(event)
        at, phase = event.incident.at, _phase(event.incident, pools)
        return self._snapshot(_RankLog(), Ranks(), at, phase, pools, {}, (event.incident,))

    def note_role(self, role: Role) -> None:
        """A PD role revealed by a line that is not folded into a snapshot (replay skips those)."""
        self._seen_role = role

    def _pool_size(self, event: PoolSize) -> None:
        if event.boot and (self._boot_at is None or event.at - self._boot_at > BOOT_WINDOW):
            self._boot_id, self._boot_at = f"log@{event.at:.0f}", event.at
            self._ranks = OrderedDict()  # a new start: the previous one's ranks are gone
        state = self._rank(event.ranks, event.at)
        if state is not None:
            state.sizes[event.pool] = event.size
        self._sizes[event.pool] = event.size

    def _start(self, event: Start) -> None:
        state = self._rank(event.ranks, event.at)
        if state is not None:
            state.seq, state.boot_id, state.release = 0, f"log@{event.at:.0f}", event.release
            state.dead = False

    def _figures(self, event: Figures) -> Snapshot | None:
        self._seen_role = event.role or self._seen_role
        if event.ranks is None:
            return None  # no one rank's figures (vLLM's aggregated line): the timeline shows them
        state = self._rank(event.ranks, event.at)
        if state is None:
            return None
        pools: dict[Pool, PoolAccount] = {}
        for pool in sorted({*event.used, *event.usage, *event.negative}, key=list(Pool).index):
            used = event.used.get(pool)
            if used is None and pool in event.negative:
                used = -1  # "-0.00": a surplus of at least one slot; the ratio hides the rest
            pools[pool] = PoolAccount(pool, state.sizes.get(pool, self._sizes.get(pool)), used=used)
        queues = dict(event.queues)
        busy = event.busy or any(queues.get(q) for q in ("running", "waiting"))
        return self._snapshot(
            state, event.ranks, event.at, Phase.BUSY if busy else Phase.UNKNOWN, pools, queues, ()
        )

    def _incident(self, event: RankIncident) -> Snapshot | None:
        if event.ranks is None:  # held apart: never rank 0's by default
            self.unattributed = [*self.unattributed[1 - _KEEP_UNATTRIBUTED :], event.incident]
            self.unattributed_total += 1
            return None
        state = self._rank(event.ranks, event.incident.at)
        if state is None:
            return None
        if event.incident.kind is IncidentKind.SCHEDULER_EXCEPTION:
            state.dead = True
        pools = self._trusted(event)
        incident = (
            event.incident if len(pools) == len(event.incident.pools) else _replaced(event.incident, pools)
        )
        return self._snapshot(
            state, event.ranks, incident.at, _phase(incident, pools), pools, {}, (incident,)
        )

    def _dead(self, event: Dead) -> Snapshot | None:
        ranks = event.ranks or Ranks()
        known = self._ranks.get(ranks)
        if (known is not None and known.dead) or (
            event.ranks is None and any(r.dead for r in self._ranks.values())
        ):
            return None  # the engine said so itself, or another process already did
        incident = Incident(IncidentKind.SCHEDULER_EXCEPTION, event.message, event.at)
        return self._incident(RankIncident(ranks, incident))

    def _trusted(self, event: RankIncident) -> dict[Pool, PoolAccount]:
        """The incident's pools, without those a PD decode worker's check states only in part."""
        pools = {a.pool: a for a in event.incident.pools}
        if self._current_role() is Role.DECODE:
            for pool in event.decode_drops:
                pools.pop(pool, None)
        return pools

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
            state = self._ranks[ranks] = _RankLog(boot_id=self._boot_id)
        self._ranks.move_to_end(ranks)
        state.last_at = max(state.last_at, at)
        if self._boot_id and state.boot_id != self._boot_id:
            state.boot_id, state.seq = self._boot_id, 0
        return state

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
        state.seq += 1
        worker = WorkerId(
            self._worker,
            self._current_role(),
            ranks.dp,
            ranks.tp,
            ranks.pp,
            release=state.release,
            instance=self._instance,
            engine=self._engine,
        )
        return Snapshot(
            worker=worker,
            seq=state.seq,
            taken_at=at,
            phase=phase,
            pools=pools,
            source=self._source,
            queues=dict(queues),
            incidents=incidents,
            boot_id=state.boot_id,
        )


def _phase(incident: Incident, pools: Mapping[Pool, PoolAccount]) -> Phase:
    if not pools:
        return Phase.UNKNOWN
    return Phase.BUSY if incident.kind is IncidentKind.BUSY_CHECK_FAILED else Phase.IDLE


def _replaced(incident: Incident, pools: Mapping[Pool, PoolAccount]) -> Incident:
    return replace(incident, pools=tuple(pools.values()))

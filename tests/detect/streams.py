"""Synthetic snapshot streams for the detector tests: one rank, a fake clock, pools by gap."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.model.findings import Tripwire
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from rigs.fakes.clock import FakeClock

WORKER = WorkerId(
    "prefill-0", Role.PREFILL, dp_rank=0, tp_rank=1, pp_rank=0, model="qwen3-next", engine="sglang"
)
SIZES = {Pool.FULL: 10_000, Pool.MAMBA: 476, Pool.HOST: 20_000}


def exact(pool: Pool, gap: int, *, available: int | None = None, held: int = 10) -> PoolAccount:
    """An exact account of ``pool`` whose conservation gap is ``gap``."""
    size = SIZES[pool]
    avail = size // 2 if available is None else available
    evictable = size - avail - held - gap
    return PoolAccount(pool, size, avail, evictable, 0, held, 0, exactness=Exactness.EXACT)


def coarse(pool: Pool, used: int) -> PoolAccount:
    """SGLang's own figures: size, available, evictable (``used = size - available - evictable``)."""
    size = SIZES[pool]
    return PoolAccount(pool, size, size - used, 0)


@dataclass
class RankStream:
    """Successive snapshots of one rank; every ``next`` is a new scheduler iteration."""

    clock: FakeClock
    worker: WorkerId = WORKER
    boot_id: str = "boot-1"
    seq: int = 100
    strict: bool | None = None
    step: float = 1.0
    probe: ProbeHealth | None = None
    queues: Mapping[str, int] = field(default_factory=dict)

    def next(
        self,
        *accounts: PoolAccount,
        gap: int | None = None,
        phase: Phase = Phase.BUSY,
        tripwires: tuple[Tripwire, ...] = (),
        incidents: tuple[Incident, ...] = (),
    ) -> Snapshot:
        """Advance the clock by ``step`` and take a snapshot (``gap``: an exact mamba pool)."""
        self.clock.advance(self.step)
        self.seq += 1
        pools = list(accounts)
        if gap is not None:
            pools.append(exact(Pool.MAMBA, gap))
        if not pools:
            pools = [exact(Pool.FULL, 0), exact(Pool.MAMBA, 0)]
        return self.snapshot(pools, phase, tripwires, incidents)

    def snapshot(
        self,
        pools: list[PoolAccount],
        phase: Phase = Phase.BUSY,
        tripwires: tuple[Tripwire, ...] = (),
        incidents: tuple[Incident, ...] = (),
    ) -> Snapshot:
        return Snapshot(
            worker=self.worker,
            seq=self.seq,
            taken_at=self.clock.now,
            phase=phase,
            pools={a.pool: a for a in pools},
            source="probe",
            queues=dict(self.queues),
            tripwires=tripwires,
            incidents=incidents,
            probe=self.probe,
            idle_check_strict=self.strict,
            boot_id=self.boot_id,
        )

    def restart(self) -> None:
        self.boot_id = f"boot-{int(self.boot_id.split('-')[1]) + 1}"
        self.seq = 0

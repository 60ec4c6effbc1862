"""The cheap path: one exact snapshot of a rank, read at a scheduler loop boundary.

O(live requests), Python ints and ``len()`` only (no tensor contents, no GPU synchronisation).
With a :class:`~poolwatch.probe.sglang.waiting.WaitingHolders` tracker and ``exact_waiting=False`` a
long waiting queue is not walked: its copy-on-write Mamba holders are recalled from the last
exact scan, and a Mamba gap found that way is checked with an exact scan before it is returned.
The result is a plain :class:`poolwatch.model.snapshot.Snapshot`; serialising it is the server thread's
job, so the scheduler thread only builds it and swaps a reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model.findings import Tripwire
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, WorkerId
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.footprint import holdings
from poolwatch.probe.sglang.host_census import HostReader
from poolwatch.probe.sglang.phase import gate_readings, phase_of, queue_depths
from poolwatch.probe.sglang.pool_terms import pool_kinds, read_pools
from poolwatch.probe.sglang.requests import LiveSet, collect_live, role_of
from poolwatch.probe.sglang.shapes import HeldRule, Shape
from poolwatch.probe.sglang.totals import Memo
from poolwatch.probe.sglang.waiting import WaitingHolders

__all__ = ["Sample", "build_snapshot", "idle_check_strict", "take_sample"]


@dataclass(frozen=True, slots=True)
class Sample:
    """What one read pass found (the live set is kept for a census in the same pass)."""

    role: str
    phase: Phase
    pools: dict[Pool, PoolAccount]
    queues: dict[str, int]
    live: LiveSet
    gates: dict[str, int | None] = field(default_factory=dict)  # phase.gate_readings: the final decision's
    page: int = 1  # the full pool's page size, in slots


def idle_check_strict(shape: Shape, environ: Mapping[str, str]) -> bool:
    """Whether SGLang's own idle check crashes the server (True) or only warns (False)."""
    if shape.held_rule is HeldRule.SEQLEN:
        return True  # before 0.5.5.post3 a leak always raises
    raw = environ.get("SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE", "true").strip().lower()
    return raw not in ("0", "false", "no", "off")


def _full_exact(sched: Any, shape: Shape, reading: Reading, phase: Phase) -> bool:
    """0.5.4's figures (no ``kv_allocated_len``) are exact only without overlap scheduling."""
    if shape.held_rule is not HeldRule.SEQLEN or phase is Phase.IDLE:
        return True
    return not bool(reading.attr(sched, "enable_overlap", optional=True))


def hisparse_blurs(shape: Shape, phase: Phase, gates: Mapping[str, int | None]) -> bool:
    """Whether HiSparse leaves the ``full``/``swa`` figures no proof of a gap.  With HiSparse on
    (0.5.10+), ``PoolStats``' free count is the smaller of the logical allocator's and the device
    buffer's (a budget, not a free list), and host backup briefly over-releases the device counter,
    so SGLang itself checks those pools only at idle with its staging queue empty (0.5.10) or never
    (0.5.12 on).  The probe concludes exactly where SGLang would; elsewhere the accounts are coarse.
    A gate that could not be read counts as on (no page from figures that may not add up)."""
    hisparse = gates.get("hisparse", 0)
    if hisparse == 0:
        return False
    if hisparse is None or shape.since >= (0, 5, 12) or shape.idle_hook == "on_idle":
        return True
    return phase is not Phase.IDLE or gates.get("hisparse_staging") != 0


# While the PD decode offload manager holds finished requests (``ongoing_offload``: their KV is being
# copied to the host), their rows and KV are held where no queue the probe reads lists them, and up
# to 0.5.5.post3 the prompt's slots are already back on the free list while the chunk cache still
# counts them protected (by design, until the copy completes).  SGLang's own idle check does not
# look then either; the full pool and the request rows are coarse until the copies complete.
OFFLOAD_BLURS = (Pool.FULL, Pool.REQ)


def blur(pools: dict[Pool, PoolAccount], kinds: tuple[Pool, ...] = (Pool.FULL, Pool.SWA)) -> None:
    """Make ``kinds``' accounts coarse in place: their figures stay, their gap is unknown."""
    for pool in kinds:
        if pool in pools:
            pools[pool] = replace(pools[pool], held=None, exactness=Exactness.COARSE)


def _page_size(sched: Any, reading: Reading) -> int:
    page = reading.attr(sched, "page_size", optional=True)
    if page is MISSING or not isinstance(page, int) or page < 1:
        page = reading.attr(sched, "token_to_kv_pool_allocator.page_size", optional=True)
    return page if isinstance(page, int) and page >= 1 else 1


def take_sample(
    sched: Any,
    shape: Shape,
    reading: Reading,
    *,
    waiting: WaitingHolders | None = None,
    exact_waiting: bool = True,
    memo: Memo | None = None,
) -> Sample:
    """Read every pool, queue and live request of ``sched``; failures land in ``reading``.

    ``waiting``/``exact_waiting=False``: recall the waiting queue's Mamba holders instead of
    scanning the queue, unless that leaves a Mamba gap (then scan and read again, so a gap is
    only ever returned from an exact scan).  ``memo`` carries what did not change between samples."""
    role = role_of(sched, reading)
    depths = queue_depths(sched, reading, role)
    phase = phase_of(depths)
    kinds = pool_kinds(sched, shape, reading)
    mamba = kinds.ssm  # without a Mamba pool, waiting requests hold nothing
    live = collect_live(
        sched,
        reading,
        role,
        shape=shape,
        mamba=mamba,
        tracker=waiting,
        exact_waiting=exact_waiting,
        memo=memo,
    )
    page = _page_size(sched, reading)
    full_exact = _full_exact(sched, shape, reading, phase)
    held = holdings(live, shape, page, reading, full_exact=full_exact, memo=memo)
    pools = read_pools(sched, shape, reading, held, role, kinds, memo.root if memo is not None else None)
    host = (memo.host if memo is not None else HostReader()).read(sched, reading)  # HiCache's host tier
    if host is not None:
        pools[Pool.HOST] = host
    if not live.waiting_exact and Pool.MAMBA in pools and gap(pools[Pool.MAMBA]) not in (0, None):
        return take_sample(sched, shape, reading, waiting=waiting, exact_waiting=True, memo=memo)
    queues = {k: v for k, v in depths.items() if v is not None}
    gates = gate_readings(sched, reading, role)
    if hisparse_blurs(shape, phase, gates):
        blur(pools)
    if depths.get("decode_offload"):
        blur(pools, OFFLOAD_BLURS)
    return Sample(role, phase, pools, queues, live, gates, page)


def build_snapshot(
    sample: Sample,
    *,
    worker: WorkerId,
    seq: int,
    taken_at: float,
    tripwires: tuple[Tripwire, ...],
    health: ProbeHealth,
    strict: bool,
    boot_id: str,
) -> Snapshot:
    return Snapshot(
        worker=worker,
        seq=seq,
        taken_at=taken_at,
        phase=sample.phase,
        pools=sample.pools,
        source="probe",
        queues=sample.queues,
        tripwires=tripwires,
        probe=health,
        idle_check_strict=strict,
        boot_id=boot_id,
    )

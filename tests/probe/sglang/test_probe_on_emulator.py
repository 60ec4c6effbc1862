"""The probe on the emulator's scheduler ranks: the same code that reads real SGLang."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from poolwatch.conservation import gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.scheduler import Scheduler
from poolwatch_emulator.workload import WorkloadConfig

CONFIG = ProbeConfig(sample_interval_s=0.0, serve=False, directory="/nonexistent-poolwatch-test-dir")
SHAPE = ModelShape(full_kv_tokens=8192, mamba_slots=96, max_running_requests=16, context_len=2048)
WORKLOAD = WorkloadConfig(
    rate=12.0, prompt_median=300, output_median=12, prefix_median=120, burst_s=2.0, gap_s=3.0
)


@pytest.fixture
def probed() -> Iterator[None]:
    yield
    uninstall(Scheduler)


def run(
    version: str, steps: int, *, faults: str = "", chunk: int = 128, **roles: int
) -> list[tuple[str, Snapshot]]:
    """Every new snapshot of every rank, in order, as ``(role, snapshot)``."""
    config = ClusterConfig(
        version=version,
        shape=SHAPE,
        workload=WORKLOAD,
        chunked_prefill_size=chunk,
        faults=tuple(parse_fault(f) for f in faults.split(",") if f),
        idle_check_strict=False,
        **roles,
    )
    uninstall(Scheduler)
    install(SGLANG, Scheduler, replace(CONFIG, release=version))  # the probe reads its release from config
    cluster = Cluster(config)
    seen: list[tuple[str, Snapshot]] = []
    last: dict[int, int] = {}
    for _ in range(steps):
        cluster.step()
        for sched in cluster.schedulers:
            probe = probe_of(sched)
            assert probe is not None
            snap = probe.latest
            if snap is not None and last.get(id(sched)) != snap.seq:
                last[id(sched)] = snap.seq
                seen.append((sched.disaggregation_mode.value, snap))
    return seen


@pytest.mark.parametrize("version", ["0.5.4.post1", "0.5.9", "0.5.12"])
@pytest.mark.usefixtures("probed")
def test_without_faults_every_pool_of_every_rank_balances_at_every_sample(version: str) -> None:
    seen = run(version, 160, prefill=1, decode=1)
    assert len(seen) > 200
    unbalanced = [
        (role, s.seq, p.value, gap(a)) for role, s in seen for p, a in s.pools.items() if gap(a) != 0
    ]
    assert unbalanced == []
    assert all(s.tripwires == () for _, s in seen)
    assert {s.phase.value for _, s in seen} >= {"busy", "idle"}


@pytest.mark.usefixtures("probed")
def test_a_unified_rank_balances_too() -> None:
    seen = run("0.5.9", 120, prefill=0, decode=0, unified=1)
    assert seen
    assert all(gap(a) == 0 for _, s in seen for a in s.pools.values())


@pytest.mark.usefixtures("probed")
def test_the_seed_double_free_is_caught_at_the_first_chunk_boundary_while_the_full_pool_balances() -> None:
    seen = run("0.5.4.post1", 60, faults="pd-chunked-mamba-double-free@step=1", prefill=1, decode=1)
    prefill = [s for role, s in seen if role == "prefill"]
    first = next(s for s in prefill if s.tripwires)
    (wire, *_) = first.tripwires
    assert (wire.kind, wire.pool, wire.first_seen_hook) == (
        TripwireKind.FREE_AND_LIVE,
        Pool.MAMBA,
        "process_prefill_chunk",
    )
    assert len(wire.slots) == 1
    assert gap(first.pools[Pool.MAMBA]) is not None
    assert gap(first.pools[Pool.MAMBA]) < 0
    assert all(gap(s.pools[Pool.FULL]) == 0 for s in prefill)
    assert all(gap(a) == 0 for role, s in seen if role == "decode" for a in s.pools.values())


SWA_SHAPE = ModelShape(
    full_kv_tokens=8192, mamba_slots=None, swa_kv_tokens=8192, page_size=16, max_running_requests=16,
    context_len=2048,
)  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.9", "0.5.12"])
@pytest.mark.usefixtures("probed")
def test_the_swa_pool_is_exact_while_busy_from_the_requests_window_frontiers(version: str) -> None:
    config = ClusterConfig(
        version=version, shape=SWA_SHAPE, workload=WORKLOAD, chunked_prefill_size=128, unified=1,
        prefill=0, decode=0, idle_check_strict=False,
    )  # fmt: skip
    uninstall(Scheduler)
    install(SGLANG, Scheduler, replace(CONFIG, release=version))
    cluster = Cluster(config)
    swa = []
    for _ in range(160):
        cluster.step()
        for sched in cluster.schedulers:
            probe = probe_of(sched)
            assert probe is not None
            if probe.latest is not None:
                swa.append((probe.latest.phase.value, probe.latest.pools[Pool.SWA]))
    busy_held = [a.held for phase, a in swa if phase == "busy"]
    assert busy_held
    assert all(h is not None for h in busy_held)
    assert any(h for h in busy_held)
    assert all(gap(a) == 0 for _, a in swa)

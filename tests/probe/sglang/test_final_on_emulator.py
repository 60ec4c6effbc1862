"""The last word always lands: on every emulated release family, whenever SGLang's strict idle
check raises on a broken pool, the probe has written the rank's final snapshot first, at the
production sampling rates.  "About to raise" is decided the way the release's check decides it:
with fast PD transfers the check runs while 0.5.4's ``last_batch`` still holds the finished batch
(the probe's phase says busy), and from 0.5.12 ``on_idle`` is entered, and returns, while the rank
is not yet fully idle (the old code sampled only that first, gated entry)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.files import read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import install, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.final import residual
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.scheduler import Scheduler
from poolwatch_emulator.workload import WorkloadConfig

pytestmark = pytest.mark.slow

SHAPE = ModelShape(full_kv_tokens=8192, mamba_slots=96, max_running_requests=16, context_len=2048)
VERSIONS = ["0.5.4.post1", "0.5.9", "0.5.12"]  # every release family the emulator models


@pytest.fixture
def probed() -> Iterator[None]:
    yield
    uninstall(Scheduler)


def run_until_crash(version: str, transfer_s: float, directory: Path) -> tuple[Cluster, bool]:
    """A PD cluster on ``version`` with the probe at its defaults (but serving); 0.5.4.post1 gets
    the seed double free, the others a Mamba slot lost on the prefill rank (taken off its free
    list) 2 s in."""
    seed = version == "0.5.4.post1"
    sizes = {"prompt_median": 300, "output_median": 12, "prefix_median": 120}
    workload = WorkloadConfig(rate=12.0, burst_s=2.0, gap_s=3.0, transfer_latency_s=transfer_s, **sizes)
    config = ClusterConfig(
        version=version,
        shape=SHAPE,
        workload=workload,
        chunked_prefill_size=128,
        faults=(parse_fault("pd-chunked-mamba-double-free@2s"),) if seed else (),
    )
    probe = replace(ProbeConfig.from_env({}), serve=False, directory=str(directory), release=version)
    uninstall(Scheduler)
    install(SGLANG, Scheduler, probe)
    cluster = Cluster(config)
    leaked = seed
    for _ in range(4000):
        cluster.step()
        if not leaked and cluster.clock.now > 2.0:
            pool = cluster.by_role("prefill")[0].ranks[0].req_to_token_pool
            (getattr(pool, "mamba_allocator", None) or pool.mamba_pool).alloc(1)
            leaked = True
        if cluster.crashed:
            return cluster, leaked
    return cluster, leaked


@pytest.mark.parametrize("transfer_s", [0.001, 0.05], ids=["fast-transfer", "slow-transfer"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.usefixtures("probed")
def test_sglangs_idle_check_never_raises_before_the_final_snapshot_is_written(
    tmp_path: Path, version: str, transfer_s: float
) -> None:
    cluster, leaked = run_until_crash(version, transfer_s, tmp_path)
    assert leaked
    (worker,) = cluster.crashed
    assert worker.role == "prefill"
    assert "memory leak detected" in worker.crash_message, worker.crash_message
    ((name, doc),) = read_final_dir(tmp_path, read_secret(tmp_path) or "")
    final: Snapshot = parse_snapshot(doc)
    assert name.endswith("-dp0-tp0-pp0.final")
    assert final.final
    assert final.boot_id  # the sidecar hands it over only for this life
    assert residual(Pool.MAMBA, final.pools[Pool.MAMBA]) != 0  # names the pool SGLang raises on

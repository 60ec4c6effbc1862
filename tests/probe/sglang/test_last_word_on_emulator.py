"""The last word waits on the emulator (issue 23): the seed double free on 0.5.4.post1's PD prefill
rank, the probe serving on loopback.  With a collector long-polling the endpoint (as the sidecar
does) the doomed rank holds until the final snapshot was handed over; with no one collecting, or
serving off, it does not wait; the healthy decode rank never waits; SGLang's own error still
crashes the rank."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tests.sglang_real.long_poll import LongPoll

from poolwatch.discovery.files import ensure_secret
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.last_word import Outcome
from poolwatch.probe.lifecycle import detach, install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.scheduler import Scheduler
from poolwatch_emulator.workload import WorkloadConfig

pytestmark = pytest.mark.slow

SHAPE = ModelShape(full_kv_tokens=8192, mamba_slots=96, max_running_requests=16, context_len=2048)


@pytest.fixture
def probed() -> Iterator[list[Cluster]]:
    clusters: list[Cluster] = []
    yield clusters
    for cluster in clusters:  # a crashed rank is never detached by its scheduler: end its endpoint here
        for rank in cluster.schedulers:
            detach(rank)
    uninstall(Scheduler)


def seeded_cluster(directory: Path, *, serve: bool) -> Cluster:
    sizes = {"prompt_median": 300, "output_median": 12, "prefix_median": 120}
    workload = WorkloadConfig(rate=12.0, burst_s=2.0, gap_s=3.0, transfer_latency_s=0.001, **sizes)
    config = ClusterConfig(
        version="0.5.4.post1",
        shape=SHAPE,
        workload=workload,
        chunked_prefill_size=128,
        faults=(parse_fault("pd-chunked-mamba-double-free@2s"),),
    )
    probe = replace(ProbeConfig.from_env({}), serve=serve, directory=str(directory), release="0.5.4.post1")
    uninstall(Scheduler)
    install(SGLANG, Scheduler, probe)
    return Cluster(config)


def rank_probe(cluster: Cluster, role: str) -> SglangProbe:
    probe = probe_of(cluster.by_role(role)[0].ranks[0])
    assert probe is not None
    return probe


def crash(cluster: Cluster) -> None:
    for _ in range(4000):
        cluster.step()
        if cluster.crashed:
            return
    pytest.fail("the seeded rank never crashed")


def test_the_doomed_rank_waits_until_the_collector_was_handed_its_final_snapshot(
    tmp_path: Path, probed: list[Cluster]
) -> None:
    cluster = seeded_cluster(tmp_path, serve=True)
    probed.append(cluster)
    prefill = rank_probe(cluster, "prefill")
    assert prefill.publisher is not None
    assert prefill.publisher.server is not None
    collector = LongPoll(prefill.publisher.server.url, ensure_secret(str(tmp_path)))
    collector.start()
    try:
        # collecting before the fault, as a deployed sidecar is (a loaded host starts threads late)
        assert collector.wait_attended(prefill.publication)
        crash(cluster)
    finally:
        collector.stop()
    (worker,) = cluster.crashed
    assert "memory leak detected" in worker.crash_message  # SGLang's own error, untouched
    assert prefill.last_word is Outcome.COLLECTED
    final = prefill.latest
    assert final is not None
    assert final.final
    assert max(snap.seq for snap in collector.snapshots) >= final.seq  # it really got the last word
    assert rank_probe(cluster, "decode").last_word is None  # a healthy rank never waits


def test_no_wait_when_no_one_collects(tmp_path: Path, probed: list[Cluster]) -> None:
    cluster = seeded_cluster(tmp_path, serve=True)
    probed.append(cluster)
    crash(cluster)
    assert rank_probe(cluster, "prefill").last_word is Outcome.UNATTENDED


def test_no_wait_when_the_probe_serves_nothing(tmp_path: Path, probed: list[Cluster]) -> None:
    cluster = seeded_cluster(tmp_path, serve=False)
    probed.append(cluster)
    crash(cluster)
    assert rank_probe(cluster, "prefill").last_word is Outcome.OFF

"""The sidecar's SGLang sources read the emulator's faces (its log file and its /metrics)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tests.sources.sglang.fakes import sglang_server

from poolwatch.commands.replay import command as replay_command
from poolwatch.conservation import assess_snapshot, describe
from poolwatch.model.rank import IncidentKind, Phase, Pool
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch.sources.sglang.metrics import SglangMetricsSource
from rigs.fakes.clock import FakeClock

emulator = pytest.importorskip("poolwatch_emulator")
scenarios = pytest.importorskip("tests.emulator.emu_scenarios")


def faces(worker: object) -> Callable[[httpx.Request], httpx.Response]:
    return sglang_server(emulator.metrics_text(worker), emulator.server_info(worker))


def test_the_seed_fault_in_the_emulated_prefill_log_replays_to_a_mamba_double_free(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = scenarios.cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free",), log_dir=tmp_path)
    assert c.run_until(lambda: bool(c.crashed), 20_000)
    c.stop()
    (log,) = [p for p in tmp_path.glob("*.log") if "prefill" in p.name]
    parser = argparse.ArgumentParser()
    replay_command.add_arguments(parser)
    code = replay_command.run(parser.parse_args([str(log)]))
    out = capsys.readouterr().out
    assert code == 1
    assert "mamba: surplus of 1 slot (double free); full: balanced" in out


@pytest.mark.slow
async def test_the_log_source_follows_an_emulated_worker_while_it_runs(tmp_path: Path) -> None:
    c = scenarios.cluster("0.5.12", pd=False, log_dir=tmp_path, idle_check_strict=False,
                          faults=("mamba-cow-leak-on-abort",), workload=scenarios.COW)  # fmt: skip
    (log,) = tmp_path.glob("*.log")
    source = LogSource(Target("log", DIALECT.source, str(log), "unified-0"), FakeClock(4e9), DIALECT)
    snaps = []
    async with httpx.AsyncClient() as client:
        for _ in range(40):
            c.run_steps(100)
            snaps += await source.scrape(client)
        c.drain(abort_queued=True)
        c.run_for(60.0)  # idle: the warn-mode check reports the lost slot
        snaps += await source.scrape(client) + await source.scrape(client)
    source.close()
    c.stop()
    batches = [s for s in snaps if s.phase is Phase.BUSY and not s.incidents]
    assert batches, "the emulator's batch lines were read"
    leaks = [s for s in snaps for i in s.incidents if i.kind is IncidentKind.LEAK_DETECTED]
    assert leaks, "the warn-mode leak report was read"
    assert "mamba: deficit of" in describe(assess_snapshot(leaks[0]))


async def test_the_metrics_source_reads_every_release_of_the_emulated_metrics_face() -> None:
    for version in ("0.5.4.post1", "0.5.9", "0.5.12"):
        c = scenarios.cluster(version, dp=2)
        c.run_steps(300)
        worker = c.workers[0]
        target = Target("m", "sglang-metrics", "http://emu:30000", worker.name)
        source = SglangMetricsSource(target, FakeClock())
        async with httpx.AsyncClient(transport=httpx.MockTransport(faces(worker))) as client:
            snaps = await source.scrape(client)
        c.stop()
        assert [s.worker.dp_rank for s in snaps] == [0, 1], version
        for snap in snaps:
            assert Pool.FULL in snap.pools, version
            assert snap.pools[Pool.FULL].used is not None, version
            if version != "0.5.4.post1":
                assert snap.pools[Pool.MAMBA].size == scenarios.MAMBA.mamba_slots, version


@pytest.mark.slow
async def test_an_idle_mamba_leak_on_the_emulated_metrics_face_is_proven_after_the_idle_window() -> None:
    c = scenarios.cluster("0.5.12", pd=False, idle_check_strict=False, faults=("mamba-cow-leak-on-abort",),
                          workload=scenarios.COW)  # fmt: skip
    c.run_steps(2000)
    c.drain(abort_queued=True)
    c.run_for(120.0)  # idle long enough for SGLang's 30 s idle refresh of the gauges
    worker = c.workers[0]
    clock = FakeClock()
    source = SglangMetricsSource(Target("m", "sglang-metrics", "http://emu:30000", "u0"), clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(faces(worker))) as client:
        await source.scrape(client)
        clock.advance(40.0)
        (snap,) = await source.scrape(client)
    c.stop()
    assert snap.phase is Phase.IDLE
    verdict = describe(assess_snapshot(snap))
    assert verdict.startswith("mamba: deficit of"), verdict

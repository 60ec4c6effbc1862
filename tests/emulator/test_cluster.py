"""The cluster: deterministic for a seed, simulated time, idle skipping, the real-time thread,
the probe hook and the ``emulate`` command."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pytest
from tests.emulator.emu_ledger import gaps
from tests.emulator.emu_scenarios import HEAVY, cluster

from poolwatch.conservation import Basis, assess_snapshot
from poolwatch.model.rank import Pool
from poolwatch_emulator import Cluster, ClusterConfig, attach_probes
from poolwatch_emulator import cli as emulate


def _fingerprint(c: Cluster) -> list[object]:
    return [
        (
            r.token_to_kv_pool_allocator.release_pages.tolist(),
            r.req_to_token_pool.free_slots,
            r.emu_finished_total,
        )
        for r in c.schedulers
    ]


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not() -> None:
    a, b, other = cluster(seed=5), cluster(seed=5), cluster(seed=6)
    for c in (a, b, other):
        c.run_steps(300)
    assert _fingerprint(a) == _fingerprint(b)
    assert [w.log_lines()[-1][20:] for w in a.workers] == [w.log_lines()[-1][20:] for w in b.workers]
    assert _fingerprint(a) != _fingerprint(other)


def test_run_for_advances_simulated_time_by_steps_of_dt() -> None:
    c = cluster(dt=0.1, skip_idle=False, workload=HEAVY.__class__(rate=1.0, gap_s=0.0))
    c.run_for(12.0)
    assert c.steps == 120
    assert c.clock.now == pytest.approx(12.0)


def test_idle_gaps_are_skipped_once_nothing_is_in_flight() -> None:
    c = cluster(
        workload=HEAVY.__class__(rate=2.0, prompt_median=200, output_median=20, burst_s=10.0, gap_s=3600.0)
    )
    c.run_for(7200.0)
    assert c.steps < 3000  # 72,000 steps without skipping
    assert not c.crashed
    assert all(r.emu_idle_checks for r in c.schedulers)


def test_a_crashed_prefill_worker_fails_the_transfers_and_the_decode_side_releases_them() -> None:
    c = cluster(faults=("pd-chunked-mamba-double-free",))
    c.run_until(lambda: bool(c.crashed), 4000)
    c.drain(abort_queued=True)
    decode_worker = c.by_role("decode")[0]
    assert c.run_until(decode_worker.quiescent, 4000)
    decode = decode_worker.ranks[0]
    assert not decode_worker.crashed
    assert gaps(decode)[Pool.FULL] == 0
    assert decode.token_to_kv_pool_allocator.available_size() == decode.token_to_kv_pool_allocator.size


def test_the_real_time_thread_starts_and_stops() -> None:
    c = cluster()
    c.start(time_scale=1e9)
    with pytest.raises(RuntimeError, match="already running"):
        c.start()
    c.stop()
    steps = c.steps
    c.run_steps(1)
    assert c.steps == steps + 1


def test_the_probe_attaches_to_every_rank_and_agrees_with_the_emulator(tmp_path: Path) -> None:
    pytest.importorskip("poolwatch.probe")
    from poolwatch.probe.lifecycle import probe_of

    c = cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free@step=100",))
    assert attach_probes(c, tmp_path, serve=False) == 2
    for _ in range(50):
        c.run_steps(4)
        for rank in c.schedulers:
            probe = probe_of(rank)
            assert probe is not None
            snap = probe.sample_now("test")
            assert snap is not None
            for finding in assess_snapshot(snap):
                if finding.gap is not None and finding.basis is Basis.EXACT:
                    assert finding.gap == gaps(rank)[finding.pool], (c.steps, finding)
    prefill = c.by_role("prefill")[0].ranks[0]
    assert prefill.faults.fired["pd-chunked-mamba-double-free"] == 1


def test_bad_cluster_settings_are_clear_value_errors() -> None:
    with pytest.raises(ValueError, match="unsupported SGLang version"):
        Cluster(ClusterConfig(version="0.4.0"))
    with pytest.raises(ValueError, match="PD needs both"):
        Cluster(ClusterConfig(prefill=1, decode=0))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    emulate.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_emulate_command_prints_where_each_face_listens(tmp_path: Path) -> None:
    out = io.StringIO()
    args = _args(
        "--duration",
        "5",
        "--time-scale",
        "0",
        "--log-dir",
        str(tmp_path),
        "--full-kv-tokens",
        "16384",
        "--mamba-slots",
        "192",
        "--max-running",
        "48",
        "--tp",
        "2",
    )
    assert emulate.run(args, out) == 0
    text = out.getvalue()
    assert "prefill-0: http://127.0.0.1:" in text
    assert "decode-0: http://127.0.0.1:" in text
    assert (tmp_path / "prefill-0.log").read_text().count("KV Cache is allocated") == 1


def test_the_emulate_command_refuses_a_bad_fault_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert emulate.run(_args("--fault", "nope@3s")) == 2
    assert "unknown fault 'nope'" in capsys.readouterr().err


def test_importing_the_emulator_does_not_import_torch() -> None:
    code = "import sys, poolwatch_emulator, poolwatch_emulator.cli; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

"""``poolwatch demo --fault NAME``'s cluster: the classic PD cluster for the first classes, the
fault's catalogue scenario for the others; and the ground truth it tells of a blind-class fault."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from poolwatch_emulator import FAULTS, Cluster, parse_fault
from poolwatch_emulator.demo import add_arguments
from poolwatch_emulator.demo_cluster import blind_line, demo_config, is_classic, narrated
from poolwatch_emulator.scenarios import SCENARIOS


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


CLASSIC = {
    "pd-chunked-mamba-double-free", "mamba-cow-leak-on-abort", "full-kv-leak-on-retract",
    "pd-decode-abort-kv-leak", "hicache-host-leak", "hicache-host-double-free",
}  # fmt: skip


def test_the_first_classes_run_on_the_classic_pd_cluster_the_others_in_their_scenario(tmp_path: Path) -> None:
    assert {name for name, info in FAULTS.items() if is_classic(info)} == CLASSIC
    seed = demo_config(_args(), parse_fault("pd-chunked-mamba-double-free@30s"), tmp_path)
    assert (seed.prefill, seed.decode, seed.version, seed.tp) == (1, 1, "0.5.4.post1", 2)
    assert seed.shape.mamba_slots is not None
    host = demo_config(_args("--version", "0.5.9"), parse_fault("hicache-host-double-free@30s"), tmp_path)
    assert (host.version, host.shape.host_kv_tokens, host.shape.mamba_slots) == (
        "0.5.9",
        2 * host.shape.full_kv_tokens,
        None,
    )


@pytest.mark.parametrize("name", sorted(set(FAULTS) - CLASSIC))
def test_every_later_fault_runs_in_its_scenario_with_the_demos_settings(name: str, tmp_path: Path) -> None:
    fault = parse_fault(f"{name}@30s")
    config = demo_config(_args("--tp", "1", "--seed", "3"), fault, tmp_path)
    config.check()
    s = SCENARIOS[name]
    assert (config.version, bool(config.prefill), config.tp, config.seed) == (s.version, s.pd, 1, 3)
    assert config.faults == (fault,)  # armed after the healthy time, not at the scenario's trigger
    assert config.log_dir == tmp_path


def test_a_release_the_fault_never_shipped_in_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot be injected on 0\.5\.12"):
        demo_config(
            _args("--version", "0.5.12"), parse_fault("hicache-write-acks-undrained@1s"), tmp_path
        ).check()


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("pd-prefill-stranded-kv", "stranded holder(s) keep"),
        ("radix-evictable-overcount", "full_evictable_size_ off by +16 while every id is where it belongs"),
        ("encoder-credit-per-step", "free slots of 2,048 (credited more than it gave)"),
    ],
)
def test_the_demo_tells_the_ground_truth_of_a_fault_the_gap_cannot(
    name: str, needle: str, tmp_path: Path
) -> None:
    info = FAULTS[name]
    assert narrated(info)
    c = Cluster(demo_config(_args("--tp", "1"), parse_fault(f"{name}@1s"), tmp_path))
    try:
        assert blind_line(c, info) is None  # nothing before it struck
        assert c.run_until(lambda: blind_line(c, info) is not None, 3000)
        line = blind_line(c, info)
    finally:
        c.stop()  # closes the workers' log files
    assert line is not None
    assert needle in line
    assert line.endswith(f"it should page {info.pages}")


def test_the_gap_faults_are_not_narrated() -> None:
    assert not any(narrated(FAULTS[n]) for n in CLASSIC)

"""``poolwatch emulate --scenario FAULT``: the fault's catalogue scenario, with the command's TP,
DP, seed, step and log settings; ``--fault`` re-arms it; a bad name is a clear error."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from poolwatch_emulator import parse_fault
from poolwatch_emulator.cli import add_arguments, config_from_args, run
from poolwatch_emulator.scenarios import SCENARIOS


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_scenario_brings_its_features_and_the_commands_settings(tmp_path: Path) -> None:
    config = config_from_args(
        _args("--scenario", "spec-stranded-tail-page", "--tp", "2", "--seed", "5", "--log-dir", str(tmp_path))
    )
    s = SCENARIOS["spec-stranded-tail-page"]
    assert config.speculative is not None
    assert (config.version, config.shape, config.tp, config.seed, config.log_dir) == (
        s.version, s.shape, 2, 5, tmp_path,
    )  # fmt: skip
    assert [f.name for f in config.faults] == ["spec-stranded-tail-page"]


def test_fault_rearms_the_scenario_and_no_fault_is_a_healthy_run() -> None:
    config = config_from_args(
        _args("--scenario", "pd-decode-stranded-kv", "--fault", "pd-decode-stranded-kv@30s")
    )
    assert config.faults == (parse_fault("pd-decode-stranded-kv@30s"),)
    assert (config.prefill, config.decode) == (1, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--scenario", "no-such-fault"), "unknown scenario 'no-such-fault'"),
        (
            ("--scenario", "hicache-write-acks-undrained", "--fault", "pd-decode-abort-kv-leak"),
            "needs a decode",
        ),
    ],
)
def test_a_bad_scenario_is_a_clear_error_and_exit_2(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_args(_args(*argv))
    assert run(_args(*argv), io.StringIO()) == 2


def test_a_scenario_runs_for_its_duration_and_says_what_it_did() -> None:
    out = io.StringIO()
    code = run(_args("--scenario", "encoder-credit-per-step", "--duration", "5", "--time-scale", "0"), out)
    assert code == 0
    assert "unified-0:" in out.getvalue()
    assert "requests finished; crashed: none" in out.getvalue()

"""``poolwatch generate``: every generator is registered, every generated file is guarded by
``--check`` and rewritten by a plain run, and ``--config`` builds the artifacts of a sidecar run
with other thresholds."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.helpers import REPO, require_tool

import poolwatch.artifacts
from poolwatch.artifacts.registry import DEPLOYABLE, GENERATORS, drift, render_all
from poolwatch.commands import generate
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.rules import ALERTS
from poolwatch.detect.schema import ALERT_NAME_PATTERN

GENERATED = sorted(render_all(REPO))


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    return generate.run(parser.parse_args(list(argv)))


def repo_copy(tmp_path: Path) -> Path:
    """What the generators read and write: the project file, the README and every generated file."""
    for path in ("pyproject.toml", "README.md", *GENERATED):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, tmp_path / path)
    return tmp_path


def tamper(text: str) -> str:
    """A hand edit of generated text: inside the first generated block of a hand-written file (the
    README's metric table, an engine page's release table, pyproject's room contracts), else the
    first ``poolwatch``."""
    block = re.search(r"(?:<!-- |# )[a-z-]+:begin[^\n]*\n", text)
    if block is not None:
        return text[: block.end()] + "edited by hand " + text[block.end() :]
    at = text.index("poolwatch")
    return text[:at] + "p00lwatch" + text[at + len("poolwatch") :]


def test_every_generator_defined_in_the_artifacts_package_is_registered() -> None:
    defined = set()
    for info in pkgutil.walk_packages(poolwatch.artifacts.__path__, "poolwatch.artifacts."):
        module = importlib.import_module(info.name)
        fn = getattr(module, "artifacts", None)
        if inspect.isfunction(fn) and fn.__module__ == info.name:
            defined.add(fn)
    assert defined == set(GENERATORS), "a module defines artifacts() that registry.GENERATORS does not list"


def test_the_generators_cover_rules_prometheusrule_runbook_index_dashboards_and_readme() -> None:
    assert {
        "README.md",
        "deploy/prometheus/poolwatch-rules.yml",
        "deploy/kubernetes/base/prometheusrule.yaml",
        "docs/runbooks/README.md",
        "docs/engines/sglang.md",
        "docs/engines/vllm.md",
    } <= set(GENERATED)
    assert {p for p in GENERATED if p.startswith("dashboards/")} == {
        f"dashboards/{p.name}" for p in (REPO / "dashboards").glob("*.json")
    }


def test_the_committed_artifacts_are_what_the_generators_write() -> None:
    assert drift(REPO) == [], "stale: run `poolwatch generate`"


@pytest.mark.parametrize("path", GENERATED)
def test_check_fails_on_a_hand_edit_of_each_generated_file_and_generate_repairs_it(
    tmp_path: Path, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = repo_copy(tmp_path)
    assert run("--root", str(root)) == 0  # in step first, whatever the checkout holds
    capsys.readouterr()
    target = root / path
    pristine = target.read_bytes()
    target.write_text(tamper(target.read_text(encoding="utf-8")), encoding="utf-8")
    assert run("--root", str(root), "--check") == 1
    assert f"stale: {path}" in capsys.readouterr().err
    assert run("--root", str(root)) == 0
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert run("--root", str(root), "--check") == 0
    assert target.read_bytes() == pristine


def test_a_deleted_generated_file_fails_the_check(tmp_path: Path) -> None:
    root = repo_copy(tmp_path)
    (root / "dashboards/poolwatch-worker.json").unlink()
    assert run("--root", str(root), "--check") == 1


def test_generate_with_a_sidecars_settings_writes_rules_that_wait_as_its_detector(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    settings = {
        "POOLWATCH_STALE_FOR": "300",
        "POOLWATCH_TARGET_DOWN_FOR": 90,
        "coarse_hold": 150,
        "POOLWATCH_RUNBOOK_BASE_URL": "https://runbooks.example/pw",
        "POOLWATCH_DASHBOARD_URL": "https://grafana.example",
        "POOLWATCH_WORKER_DASHBOARD_UID": "pw-worker",
        "POOLWATCH_TLS_VERIFY": False,
        "selector": 'job="poolwatch"',
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    out = tmp_path / "out"
    assert run("--root", str(REPO), "--config", str(config), "--out", str(out)) == 0
    rules = yaml.safe_load((out / "deploy/prometheus/poolwatch-rules.yml").read_text())["groups"][0]["rules"]
    by_alert = {r["alert"]: r for r in rules}
    assert by_alert["PoolwatchSnapshotStale"]["for"] == "5m"
    assert by_alert["PoolwatchTargetDown"]["for"] == "90s"
    assert {r["for"] for r in rules if r["alert"] == "PoolwatchSlotLeak"} == {"150s"}
    stale = by_alert["PoolwatchSnapshotStale"]
    assert 'poolwatch_snapshot_stale{job="poolwatch"} == 1' in stale["expr"]
    assert stale["annotations"]["runbook_url"] == "https://runbooks.example/pw/PoolwatchSnapshotStale.md"
    assert stale["annotations"]["dashboard_url"].startswith("https://grafana.example/d/pw-worker/pw-worker?")
    assert (out / "dashboards/pw-worker.json").is_file()
    assert run("--root", str(REPO), "--config", str(config), "--out", str(out), "--check") == 0
    assert drift(REPO, MixinConfig(), out) != []  # the committed defaults differ from that run


def test_a_bad_setting_in_the_config_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("POOLWATCH_DEFICIT_SAMPLES: 0\n", encoding="utf-8")
    assert run("--root", str(REPO), "--config", str(config), "--out", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "POOLWATCH_DEFICIT_SAMPLES: must be at least 1" in err


def test_rules_with_a_selector_and_a_cluster_label_pass_promtool(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    config = tmp_path / "sidecar.yaml"
    config.write_text('selector: job="poolwatch"\ncluster_label: cluster\n', encoding="utf-8")
    assert run("--root", str(REPO), "--config", str(config), "--out", str(tmp_path)) == 0
    rules = tmp_path / "deploy/prometheus/poolwatch-rules.yml"
    assert "on (cluster, namespace, pod, worker, role, dp_rank, tp_rank, pp_rank)" in rules.read_text()
    result = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_name_matches_the_pattern_the_dashboards_select() -> None:
    assert all(re.fullmatch(ALERT_NAME_PATTERN, name) for name in (a.name for a in ALERTS))


def test_outside_a_clone_generate_writes_the_deployable_artifacts_under_out(tmp_path: Path) -> None:
    """What a user of the installed package runs for their own labels: no README, no docs."""
    elsewhere = tmp_path / "not-a-clone"
    elsewhere.mkdir()
    (tmp_path / "sidecar.yaml").write_text('selector: job="poolwatch"\ncluster_label: cluster\n')
    out = tmp_path / "mine"
    argv = ["--root", str(elsewhere), "--config", str(tmp_path / "sidecar.yaml"), "--out", str(out)]
    assert run(*argv) == 0
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(render_all(REPO, MixinConfig(), DEPLOYABLE))
    assert "README.md" not in written
    assert not [p for p in written if p.startswith("docs/engines/")]
    rules = (out / "deploy/prometheus/poolwatch-rules.yml").read_text()
    assert 'job="poolwatch"' in rules
    assert run(*argv, "--check") == 0
    (out / "deploy/prometheus/poolwatch-rules.yml").write_text("edited\n")
    assert run(*argv, "--check") == 1


def test_outside_a_clone_without_out_generate_says_what_to_give_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--root", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is not a clone of poolwatch: give --out DIR" in err
    assert not list(tmp_path.iterdir())

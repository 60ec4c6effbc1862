"""The rigs' place between the tests and the benchmarks (both import them; they import neither, and
no test imports a benchmark), the release tables as the one list the tiers, the set-up script and
the overlays read, and the timeline a real-bug entry records -- without any engine installed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from poolwatch.model.snapshot import Snapshot
from rigs.sglang import releases as sglang
from rigs.timeline import Timeline
from rigs.venv import ROOT, Unavailable, Venv
from rigs.vllm import releases as vllm


def _imports(folder: str) -> list[tuple[str, str]]:
    """(file, module) of every import in ``folder``'s Python files."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path.name, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((path.name, node.module))
    return found


def _root(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_the_rigs_import_no_benchmark() -> None:
    # that no rig and no benchmark imports a test module, and that no import circles, is test_layout.py's
    offenders = [(f, m) for f, m in _imports("rigs") if _root(m) == "benchmarks" or m.startswith("bench")]
    assert offenders == []


def test_no_test_imports_a_benchmark() -> None:
    offenders = [
        (f, m) for f, m in _imports("tests") if _root(m) == "benchmarks" or _root(m).startswith("bench_")
    ]
    assert offenders == []


def test_the_set_up_script_builds_what_the_release_tables_name() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rigs.tiers"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split("\n")
    bases = {r.base for r in sglang.RELEASES}
    assert {f"sglang-venv {v}" for v in bases} <= set(out)
    assert {f"sglang-overlay {r.version}" for r in sglang.RELEASES if r.overlaid} <= set(out)
    assert {f"vllm-venv {r.venv_release}" for r in vllm.RELEASES} <= set(out)
    assert {f"vllm-overlay {r.version}" for r in vllm.RELEASES if r.overlaid} <= set(out)
    assert "rigs.tiers" in (ROOT / "scripts" / "prepare_tiers").read_text()


def test_every_tier_runs_on_releases_of_the_table_and_overlays_sit_on_a_release_with_a_venv() -> None:
    for name in sglang.Tier:
        assert sglang.tier(name), name
    assert all(sglang.release(r.base).base == r.base for r in sglang.RELEASES)
    assert vllm.tier(vllm.Tier.PROBE)
    assert vllm.tier(vllm.Tier.DEFERRED)
    assert vllm.tier(vllm.Tier.BUGS)
    assert all(not vllm.release(r.base).overlaid for r in vllm.RELEASES if r.overlaid)


def test_a_release_outside_the_table_is_refused_by_name() -> None:
    with pytest.raises(
        LookupError, match=r"SGLang 0\.5\.99 is not in the rigs' release table \(0\.5\.4\.post1"
    ):
        sglang.release("0.5.99")
    with pytest.raises(LookupError, match=r"vLLM 9\.0\.0"):
        vllm.release("9.0.0")


def test_a_missing_venv_or_overlay_names_the_command_that_makes_it(tmp_path: Path) -> None:
    venv = Venv("SGLang 0.5.6", tmp_path / "v", "scripts/sglang_venv.py 0.5.4.post1", tmp_path / "o",
                "scripts/sglang_overlay.py 0.5.6")  # fmt: skip
    assert (
        venv.missing() == f"no SGLang 0.5.6 venv at {tmp_path / 'v'}: run scripts/sglang_venv.py 0.5.4.post1"
    )
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / ".complete").touch()
    assert venv.missing().endswith("run scripts/sglang_overlay.py 0.5.6")
    with pytest.raises(Unavailable) as raised:
        venv.need()
    assert raised.value.require == "POOLWATCH_REQUIRE_TOOLS"
    assert vllm.server_venv().require == "POOLWATCH_REQUIRE_VLLM_CPU"


def test_an_overlay_goes_first_on_the_path_then_the_checkout() -> None:
    venv = sglang.release("0.5.10").venv()
    path = venv.environment({})["PYTHONPATH"].split(":")
    assert path == [str(venv.overlay), str(ROOT / "service"), str(ROOT)]
    assert venv.path.name == "0.5.9"


def test_a_release_runs_torch_on_one_thread_unless_the_caller_names_a_count() -> None:
    venv = sglang.release("0.5.23").venv()
    assert venv.environment({})["OMP_NUM_THREADS"] == "1"
    assert venv.environment({"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"


def test_the_timeline_counts_engine_steps_from_the_wrong_act(seed_snapshot: Snapshot) -> None:
    timeline = Timeline()
    timeline.look(1, None)  # a step the probe published nothing at
    timeline.wrong(3, "the release frees a live slot")
    timeline.wrong(4, "a later wrong act is not the first")
    timeline.look(5, seed_snapshot)  # the seed: a Mamba surplus of one, SGLang's idle check not yet run
    timeline.engine_said(9, "memory leak detected")
    row = timeline.row()
    assert row["wrong_act"] == (3, "the release frees a live slot")
    assert row["finding"][0] == 5
    assert "mamba" in row["finding"][1]
    assert row["page"] == (5, "PoolwatchDoubleFree")
    assert (row["steps_to_finding"], row["steps_to_page"], row["steps_to_engine"]) == (2, 2, 6)
    assert timeline.named_first


def test_a_pinned_layer_goes_after_the_overlay_and_a_missing_one_names_the_overlay_command(
    tmp_path: Path,
) -> None:
    venv = sglang.release("0.5.13").venv()
    path = venv.environment({})["PYTHONPATH"].split(":")
    assert path == [str(venv.overlay), str(venv.layers[0]), str(ROOT / "service"), str(ROOT)]
    assert venv.layers[0].name == "sglang-transformers-5.8.1"
    assert set(sglang.LAYERS) == {r.layer for r in sglang.RELEASES if r.layer}
    assert all(r.overlaid for r in sglang.RELEASES if r.layer)
    built = Venv(
        "SGLang 0.5.13", tmp_path, "v", tmp_path, "scripts/sglang_overlay.py 0.5.13", layers=(tmp_path / "l",)
    )
    (tmp_path / ".complete").touch()
    assert (
        built.missing() == f"no SGLang 0.5.13 layer at {tmp_path / 'l'}: run scripts/sglang_overlay.py 0.5.13"
    )


def test_every_release_of_the_bug_suite_is_in_the_table() -> None:
    from rigs.bugs import catalog

    for bug in catalog.bugs():
        table = sglang if bug.engine == "sglang" else vllm
        for version in bug.releases:
            table.release(bug.base(version))  # raises for a release the set-up would not build

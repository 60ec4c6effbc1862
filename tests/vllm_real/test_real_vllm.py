"""The vLLM probe against real vLLM V1 releases, on CPU, in cached per-release venvs.

Each case runs ``check_release.py`` with the release venv's Python (this checkout's ``service/`` and
root first on ``PYTHONPATH``) and requires every check it prints to pass: long clean runs with
prefix caching, chunked prefill and aborts (plain, hybrid full + Mamba, and a pool small enough
to preempt), and five injected faults -- a double free, a shared prefix freed twice (which vLLM never
asserts on), the duplicate release in one free (vLLM #42571), a leak on abort, a premature free --
each named by exact block ids before vLLM's own assert (the shared double free and the premature
free at the free itself); and with guard on (``check_guard.py``), the same faults refused inside
``free_blocks``, vLLM's pool sound by its own structures after each, its assert never firing, and
no refusal in clean runs.  One release per family boundary that matters: 0.10.2 (the oldest),
0.18.0 (skipped_waiting), 0.26.0 (deferred frees and copy-on-write), 0.33.0, 0.34.0 (the newest).
Build the venvs first::

    for v in 0.10.2 0.18.0 0.26.0 0.33.0 0.34.0; do scripts/vllm_venv.py $v; done

On 0.33.0, ``check_deferred.py`` drives the deferred-free queue (async scheduling with a consumer
KV connector, stepped like EngineCore's batch queue).  A missing venv skips its case with that
command as the reason (fails under POOLWATCH_REQUIRE_TOOLS=1).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("0.10.2", "0.18.0", "0.26.0", "0.33.0", "0.34.0")  # the oldest, the newest, and families between
CHECKS = {
    "clean_run",
    "clean_run_hybrid",
    "clean_run_preempting",
    "double_free",
    "shared_double_free",
    "duplicate_in_one_free_42571",
    "leak_on_abort",
    "premature_free",
    "plugin_activation",
    # guard mode (check_guard.py): each fault refused, the pool sound after it; nothing refused clean
    "guard_clean_run_preempting",
    "guard_clean_run_hybrid",
    "guard_double_free",
    "guard_shared_double_free",
    "guard_duplicate_in_one_free_42571",
    "guard_premature_free",
}


def venv_for(version: str) -> Path:
    cache = Path(os.environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")
    return cache / "vllm-venvs" / version


DEFERRED_CHECKS = {
    "deferred_frees_clean",
    "deferred_freed_early",
    "deferred_entry_lost",
    "guard_deferred_freed_early",
}


def _run(version: str, script: str) -> tuple[list[dict[str, object]], subprocess.CompletedProcess[str]]:
    venv = venv_for(version)
    if not (venv / ".complete").exists():
        reason = f"no vLLM {version} venv at {venv}: run scripts/vllm_venv.py {version}"
        if os.environ.get("POOLWATCH_REQUIRE_TOOLS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'service'}{os.pathsep}{ROOT}",
        "PYTHONWARNINGS": "ignore",
        "HF_HUB_OFFLINE": "1",
        "VLLM_PLUGINS": "",
        "POOLWATCH_PROBE": "",
    }
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "tests" / "vllm_real" / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=False,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")], out


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_the_probe_names_every_injected_fault_in_real_vllm(version: str) -> None:
    results, out = _run(version, "check_release.py")
    failed = [r for r in results if not r["ok"]]
    assert failed == [], json.dumps(failed, indent=1)[:6000]
    assert {r["check"] for r in results} >= CHECKS, out.stderr[-4000:]
    assert out.returncode == 0


@pytest.mark.vllm
@pytest.mark.slow
def test_deferred_frees_count_as_the_deferred_queues_and_a_fault_there_is_named() -> None:
    """0.33.0 defers frees under async scheduling with a consumer KV connector (check_deferred.py):
        a long run with blocks on the deferred queue has no finding, no pin and gap 0; blocks freed
        early while still queued are named (owner ``deferred@<fence>``) before vLLM's assert; a lost
        entry is a deficit of exactly its blocks (counted as possible connector pins, not named); with
    guard on, the early free is refused and the drain's is the only one."""
    results, out = _run("0.33.0", "check_deferred.py")
    failed = [r for r in results if not r["ok"]]
    assert failed == [], json.dumps(failed, indent=1)[:6000]
    assert {r["check"] for r in results} >= DEFERRED_CHECKS, out.stderr[-4000:]
    assert out.returncode == 0

"""The probe's HiCache ``host`` account on real SGLang releases' classes, on CPU (``check_hicache.py``
in the cached release venvs; a missing venv skips its case with the command that builds it)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.sglang_real.venvs import ROOT, venv_for

CHECKS = {"0.5.4.post1": 6, "0.5.9": 7}  # 0.5.9 also runs SGLang's own evict_host


def run_checks(version: str, script: str, *args: str) -> list[dict[str, object]]:
    """Run ``script`` in the release's venv (skip without it); every check it printed passed."""
    venv = venv_for(version)
    if not (venv / ".complete").exists():
        pytest.skip(f"no SGLang {version} venv at {venv}: run scripts/sglang_venv.py {version}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "service"), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "tests" / "sglang_real" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r for r in results if not r["ok"]] == []
    assert out.returncode == 0, out.stderr[-3000:]
    return results


@pytest.mark.sglang
@pytest.mark.parametrize("version", sorted(CHECKS))
def test_the_host_account_balances_and_names_a_host_leak_and_double_free_on_real_classes(
    version: str,
) -> None:
    assert len(run_checks(version, "check_hicache.py", version)) == CHECKS[version]


@pytest.mark.sglang
def test_0_5_23s_kv_host_pool_is_read_coarsely_on_its_real_classes() -> None:
    assert len(run_checks("0.5.23", "check_hicache_0523.py")) == 6

"""The probe against real SGLang releases, on CPU, in cached per-release venvs.

Each case runs ``check_release.py`` with the release venv's Python (this checkout's ``service/``
first on ``PYTHONPATH``) and requires every check it prints to pass.  Build the venvs first::

    scripts/sglang_venv.py 0.5.4.post1 && scripts/sglang_venv.py 0.5.9 && scripts/sglang_venv.py 0.5.23

A missing venv skips its case with that command as the reason.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.sglang_real.venvs import ROOT, venv_for

RELEASES = ("0.5.4.post1", "0.5.9", "0.5.23")


@pytest.mark.sglang
@pytest.mark.parametrize("version", RELEASES)
def test_the_probe_agrees_with_sglang_and_catches_its_faults(version: str) -> None:
    venv = venv_for(version)
    if not (venv / ".complete").exists():
        pytest.skip(f"no SGLang {version} venv at {venv}: run scripts/sglang_venv.py {version}")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "service"),
        "PYTHONWARNINGS": "ignore",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "tests" / "sglang_real" / "check_release.py"), version],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=False,
    )
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    assert failed == [], json.dumps(failed, indent=1)[:6000]
    assert len(results) >= 10, out.stderr[-4000:]
    assert out.returncode == 0

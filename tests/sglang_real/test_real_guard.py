"""Guard v2 against every SGLang release family's own classes, on CPU (``guard_release.py``).

0.5.4.post1, 0.5.9 and 0.5.23 run in their cached venvs; 0.5.5.post3 and 0.5.6 run their wheel's
``sglang`` package on the 0.5.4.post1 venv, 0.5.10 and 0.5.12 theirs on the 0.5.9 venv (an
*overlay*: ``scripts/sglang_overlay.py``, which says why).  Build what is missing first::

    scripts/sglang_venv.py 0.5.4.post1 && scripts/sglang_venv.py 0.5.9 && scripts/sglang_venv.py 0.5.23
    for v in 0.5.5.post3 0.5.6 0.5.10 0.5.12; do scripts/sglang_overlay.py $v; done

A missing venv or overlay skips its case with that command as the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.sglang_real.venvs import ROOT, venv_for

OVERLAID = {"0.5.5.post3": "0.5.4.post1", "0.5.6": "0.5.4.post1", "0.5.10": "0.5.9", "0.5.12": "0.5.9"}
RELEASES = ("0.5.4.post1", "0.5.5.post3", "0.5.6", "0.5.9", "0.5.10", "0.5.12", "0.5.23")


def overlay_for(version: str) -> Path:
    return venv_for(version).parent.parent / "sglang-overlays" / version


@pytest.mark.sglang
@pytest.mark.parametrize("version", RELEASES)
def test_guard_refuses_every_pools_wrong_free_and_nothing_on_healthy_flows(version: str) -> None:
    base = OVERLAID.get(version, version)
    venv = venv_for(base)
    if not (venv / ".complete").exists():
        pytest.skip(f"no SGLang {base} venv at {venv}: run scripts/sglang_venv.py {base}")
    path = [str(ROOT / "service")]
    if version in OVERLAID:
        overlay = overlay_for(version)
        if not (overlay / ".complete").exists():
            pytest.skip(f"no SGLang {version} overlay at {overlay}: run scripts/sglang_overlay.py {version}")
        path.insert(0, str(overlay))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONWARNINGS": "ignore",
        "HF_HUB_OFFLINE": "1",
    }
    script = ROOT / "tests" / "sglang_real" / "guard_release.py"
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(script), version],
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
    assert len(results) >= 9, out.stderr[-4000:]
    assert out.returncode == 0

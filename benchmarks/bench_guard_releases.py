"""Guard v2's decision per free on every release family's own classes (``bench_guard.py --free-path
--real``): ``bench_guard_real.py`` in each release venv (0.5.4.post1, 0.5.9, 0.5.23) and overlay
(0.5.5.post3 and 0.5.6 on the 0.5.4.post1 venv, 0.5.10 and 0.5.12 on the 0.5.9 venv), one table.
A release whose venv or overlay is missing is listed as not measured.  Figures only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sglang_real.test_real_guard import OVERLAID, RELEASES, overlay_for  # noqa: E402
from tests.sglang_real.venvs import venv_for  # noqa: E402

__all__ = ["real_table"]


def _measure(version: str) -> list[dict[str, object]] | str:
    base = OVERLAID.get(version, version)
    venv = venv_for(base)
    path = [str(ROOT / "service"), str(ROOT / "tests" / "sglang_real")]
    if version in OVERLAID:
        path.insert(0, str(overlay_for(version)))
        if not (overlay_for(version) / ".complete").exists():
            return f"no overlay (scripts/sglang_overlay.py {version})"
    if not (venv / ".complete").exists():
        return f"no venv (scripts/sglang_venv.py {base})"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONWARNINGS": "ignore",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "benchmarks" / "bench_guard_real.py"), version],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return rows if rows else f"failed: {out.stderr[-300:]!r}"


def _figure(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "--"


def real_table() -> str:
    lines = [
        "| release | pool | wrapped path | state at the free | the check alone, µs | pair, guard off, µs "
        "| pair, guard on, µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for version in RELEASES:
        rows = _measure(version)
        if isinstance(rows, str):
            lines.append(f"| {version} | -- | -- | not measured: {rows} | -- | -- | -- |")
            continue
        for r in rows:
            lines.append(
                f"| {r['release']} | {r['pool']} | `{r['path']}` | {r['state']} | {_figure(r['check'])} "
                f"| {_figure(r['off'])} | {_figure(r['on'])} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(real_table())

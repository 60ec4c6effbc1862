"""Guard v2's decision per free on every release family's own classes (``bench_guard.py --free-path
--real``): ``bench_guard_real.py`` on every release of the rigs' guard tier (:mod:`rigs.sglang.releases`:
0.5.4.post1, 0.5.9 and 0.5.23 in their venvs, 0.5.5.post3 and 0.5.6 as overlays on the 0.5.4.post1
venv, 0.5.10 and 0.5.12 on the 0.5.9 venv), one table.  A release whose venv or overlay is missing
is listed as not measured.  Figures only.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rigs.sglang.releases import Tier, release, tier

__all__ = ["real_table"]


def _measure(version: str) -> list[dict[str, object]] | str:
    """``bench_guard_real.py``'s rows on ``version``'s classes, or why there are none."""
    venv = release(version).venv()
    missing = venv.missing()
    if missing:
        return missing
    ran = venv.run("benchmarks.bench_guard_real", version)
    return ran.results if ran.results else f"failed: {ran.stderr[-300:]!r}"


def _figure(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "--"


def real_table() -> str:
    lines = [
        "| release | pool | wrapped path | state at the free | the check alone, µs | pair, guard off, µs "
        "| pair, guard on, µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for version in tier(Tier.GUARD):
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

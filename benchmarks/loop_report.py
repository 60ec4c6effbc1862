"""What an in-loop benchmark run reports, and the runs across releases (:mod:`loop_meter` measures):
:func:`emit` prints one run's figures as one JSON line inside a release venv, :func:`across` runs a
benchmark module once per release, each in that release's cached venv (:mod:`rigs.venv`), and
collects those lines, and :func:`table` prints them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loop_meter import ROOT, Figures


def emit(release: str, rows: Sequence[Figures], **extra: Any) -> None:
    """The one JSON line a run inside a release venv prints for :func:`across`."""
    print(json.dumps({"release": release, "rows": [asdict(r) for r in rows], **extra}), flush=True)


def across(
    script: Path, releases: Sequence[str], venv_of: Callable[[str], Any], *args: str
) -> list[dict[str, Any]]:
    """Run ``script --release R args`` in each release's venv; the JSON each printed (a release
    whose venv is missing, or whose run failed, is reported and left out)."""
    import subprocess

    from rigs.venv import Unavailable

    out: list[dict[str, Any]] = []
    for version in releases:
        venv = venv_of(version)
        try:
            venv.need()
        except Unavailable as exc:
            print(f"  {version}: skipped ({exc})", flush=True)
            continue
        ran = subprocess.run(
            [str(venv.python), str(script), "--release", version, *args],
            env=venv.environment(),
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        lines = [json.loads(x) for x in ran.stdout.splitlines() if x.startswith("{")]
        if ran.returncode or not lines:
            print(f"  {version}: failed (exit {ran.returncode})\n{ran.stderr[-2000:]}", flush=True)
            continue
        out.append(lines[-1])
    return out


HEADER = (
    f"{'release':<12} {'case':<22} {'steps':>5} {'step ms':>7} {'probe %':>7} {'no walk':>7} {'-meter':>7} "
    f"{'wall %':>6} "
    f"{'samples':>7} {'median µs':>9} {'p99 µs':>8} {'walks':>5} {'walk ms':>8} {'gap':>6} {'load':>5}"
)


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    for result in results:
        for r in result["rows"]:
            f = Figures(**r)
            gap = "" if f.gap is None else str(f.gap)
            lines.append(
                f"{result['release']:<12} {f.case:<22} {f.steps:5d} {f.step_s * 1e3:7.1f} {f.share:7.3f} "
                f"{f.share_sampling:7.3f} {f.share_less_meter:7.3f} {f.wall_share:6.2f} {f.samples:7d} "
                f"{f.median_us:9.0f} "
                f"{f.p99_us:8.0f} {f.walks:5d} {f.walk_ms:8.1f} {gap:>6} {f.load:5.1f}"
            )
    lines.append("")
    lines.append("(the meter's own timing, counted in probe %: at most, per step, µs -- every timed")
    lines.append(" call charged a cold call's cost, as the first after the GPU wait pays it; '-meter'")
    lines.append(" is probe % less it: the probe's own share, a lower bound)")
    for result in results:
        for r in result["rows"]:
            f = Figures(**r)
            lines.append(f"  {result['release']:<12} {f.case:<22} {f.timer_s / max(f.steps, 1) * 1e6:.1f}")
    lines.append("the probe's time per step, by entry point (µs, monotonic clock):")
    for result in results:
        for r in result["rows"]:
            f = Figures(**r)
            parts = ", ".join(f"{k} {v / max(f.steps, 1) * 1e6:.0f}" for k, v in sorted(f.by_entry.items()))
            lines.append(f"  {result['release']:<12} {f.case:<22} {parts}")
    return "\n".join(lines)

"""Fleet scale (issue 14): every row of the issue's table beside its goal, the previous build beside this one.

Each figure is measured twice in one run: with this checkout and with the *previous* build (by
default the commit the issue was measured on, extracted with ``git archive`` into a temporary
directory and put first on ``PYTHONPATH``), each in its own interpreter.  A figure the previous
build cannot produce (it had no cached render) is shown as ``—``.

* fleet rows: a real ``poolwatch serve`` process watching 1,000 probe targets on 127.0.0.1,
  served by ``fake_fleet.py`` (answers a long-poll after its ``wait``, with a fresh ``taken_at``;
  as current probes whose figures do not move -- a bodiless 304 when the sidecar holds the
  content --, as older probes without ETags, or as busy probes whose figures change every time),
  for ``--seconds``; CPU and RSS are the sidecar process's own (``/proc``), scrapes and staleness
  are read from its ``/metrics`` at both ends of the window, then SIGTERM and the time to exit;
* render: ``/metrics`` of 64 and 1,000 ranks, every rank's snapshot new since the last render
  (the realistic case at a 1 Hz scrape) and, for the cached render, nothing new;
* detector: 1,000 ranks with one firing alert each, one snapshot per rank then one evaluation;
* memory: 1,000 busy ranks' answers fed to a default store and detector until the histories and
  the 900 s trend windows are full (what a sidecar holds after ~15 min), then one render;
* trend: one ``GapSeries.add`` + ``trend()`` with a full 900 s window whose gap changes each time;
* probe: the emulator's probe (bench_probe's rank) at 256 live requests, and with 9,000 waiting.

Timings are CPU seconds (``time.process_time``) of the lower quartile of repeats: the machine is
shared, and wall time there measures the neighbours.  No pass/fail: figures beside goals.

Run: ``scripts/bench fleet`` or ``python benchmarks/bench_fleet.py [--seconds 20] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BASELINE = "53ccbcc"  # main when issue 14 was measured
sys.path.insert(0, str(HERE))

from fleet_measures import MEASURES  # noqa: E402
from fleet_sidecar import fleet_plan  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = [
    # (row, measure name, figure key, goal)
    (
        "1,000 long-polling targets (steady figures): scrapes/s",
        "fleet32",
        "rate",
        ">= 1,000/s (each rank once per 1 s interval)",
    ),
    ("  ranks refreshed < once per interval", "fleet32", "late", "0"),
    ("  ranks stale (older than 10 s)", "fleet32", "stale", "0"),
    ("  sidecar CPU, % of one core", "fleet32", "cpu", "<= 25 %"),
    ("  sidecar RSS, MB", "fleet32", "rss", "<= 300 MB"),
    ("  SIGTERM to exit, s", "fleet32", "stop", "<= 5 s"),
    ("  after ~15 min of busy ranks (histories, trend windows full): RSS, MB", "memory", "rss", "<= 300 MB"),
    ("    of which the held state, MB", "memory", "state_mb", "-"),
    ("  load average (1 min) at the end of the window", "fleet32", "load", "-"),
    ("same, older probes (no ETag: every answer in full): scrapes/s", "fleet32old", "rate", ">= 1,000/s"),
    ("  ranks refreshed < once per interval", "fleet32old", "late", "0"),
    ("  sidecar CPU, % of one core", "fleet32old", "cpu", "<= 25 %"),
    ("  sidecar CPU per answer, µs", "fleet32old", "per_answer_us", "-"),
    ("  load average (1 min)", "fleet32old", "load", "-"),
    ("same, busy probes (figures new in every answer): scrapes/s", "fleet32busy", "rate", ">= 1,000/s"),
    ("  ranks refreshed < once per interval", "fleet32busy", "late", "0"),
    ("  sidecar CPU, % of one core", "fleet32busy", "cpu", "<= 25 %"),
    ("  sidecar CPU per answer, µs", "fleet32busy", "per_answer_us", "-"),
    ("  load average (1 min)", "fleet32busy", "load", "-"),
    ("same, --scrape-concurrency 1000: scrapes/s", "fleet1000", "rate", "works"),
    ("  ranks stale (older than 10 s)", "fleet1000", "stale", "0"),
    ("  sidecar CPU, % of one core", "fleet1000", "cpu", "<= 25 %"),
    ("  /metrics answer during load, s", "fleet1000", "metrics_s", "answers"),
    ("  SIGTERM to exit, s", "fleet1000", "stop", "<= 5 s"),
    ("/metrics render, 64 ranks, all new, ms", "render", "uncached_64", "<= 10 ms"),
    ("  cached render, all new, ms", "render", "cached_64", "<= 10 ms"),
    ("  cached render, nothing new, ms", "render", "warm_64", "<= 10 ms"),
    ("/metrics render, 1,000 ranks, all new, ms", "render", "uncached_1000", "<= 150 ms"),
    ("  cached render, all new, ms", "render", "cached_1000", "<= 150 ms"),
    ("  cached render, nothing new, ms", "render", "warm_1000", "<= 150 ms"),
    ("  gzip (level 1) of the 1,000-rank page, ms", "render", "gzip_1000", "-"),
    ("  page size, 1,000 ranks: plain / gzip, KB", "render", "size_1000", "-"),
    ("sidecar watching 8 ranks at 1 Hz: CPU %", "sidecar8", "cpu", "<= 1 %"),
    ("  RSS, MB", "sidecar8", "rss", "<= 80 MB"),
    ("detector at 1,000 ranks, 1 alert each: evaluation, ms", "detector", "evaluate", "<= 5 ms"),
    ("  same, nothing new since the last evaluation, ms", "detector", "evaluate_idle", "<= 5 ms"),
    ("  observe (one snapshot), µs", "detector", "observe", "O(1) in ranks"),
    ("  one 1 Hz cycle (1,000 observes + evaluation), ms", "detector", "cycle", "-"),
    ("trend: observe with a full window, µs", "trend", "observe", "O(1) amortised"),
    ("probe cheap sample, 256 live, µs", "probe", "sample_256", "<= 150 µs"),
    ("  same, every request new since the last sample, µs", "probe", "sample_256_new", "-"),
    ("  256 live + 9,000 waiting, µs", "probe", "sample_9000", "same as without"),
    ("probe Mamba census, 256 live, µs", "probe", "census_256", "<= 500 µs"),
]


def extract(rev: str) -> Path | None:
    """The previous build's tree in a temporary directory (None if git cannot give it)."""
    target = Path(tempfile.mkdtemp(prefix="poolwatch-baseline-"))
    git = ["git", "-C", str(REPO), "archive", rev, "service"]
    archive = subprocess.run(git, capture_output=True, check=False)
    if archive.returncode != 0:
        print(f"(no baseline: git archive {rev} failed: {archive.stderr.decode().strip()})")
        return None
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "service"


def measure(name: str, tree: Path | None, seconds: float) -> dict[str, Any]:
    """One measure in its own interpreter, with ``tree`` first on the path (None: this checkout)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(HERE)])
    cmd = [sys.executable, str(HERE / "fleet_measures.py"), name, str(seconds)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": tail[0][:100]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"
    return str(value)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window of the fleet rows")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the previous build")
    parser.add_argument("--only", default="", help="comma-separated measures (default: all)")
    args = parser.parse_args(argv)
    names = [n for n in MEASURES if not args.only or n in args.only.split(",")]
    tree = extract(args.baseline) if args.baseline else None
    results: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for name in names:
        started = time.perf_counter()
        old = measure(name, tree, args.seconds) if tree is not None else {}
        new = measure(name, None, args.seconds)
        results[name] = (old, new)
        print(f"  measured {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(f"previous build: {args.baseline or 'none'}; this build: the checkout\n")
    print("| measure | previous | now | goal |\n|---|---|---|---|")
    for row, name, key, goal in ROWS:
        if name in results:
            old, new = results[name]
            before, now = shown(old.get(key, old.get("error"))), shown(new.get(key, new.get("error")))
            print(f"| {row} | {before} | {now} | {goal} |")
    if "fleet32" in results and "sidecar8" in results and "render" in results:
        print()
        print(fleet_plan(results["fleet32"][1], results["sidecar8"][1], results["render"][1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

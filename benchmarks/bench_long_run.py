"""Long runs stay linear: wall time per simulated second of a healthy emulated PD run, 600 s vs 3,600 s.

One loop, as the detection tests run it: the emulator (1 prefill + 1 decode worker, heavy chunked
PD traffic, :func:`rigs.emulated.soak.soak_config`), the real probe on every rank (sampling every
iteration, or at 1 Hz with ``--sample-interval 1``), every published snapshot into the sidecar's
store, the detector evaluated once per simulated second, and ``/metrics`` rendered every 15
simulated seconds.  It prints the wall time of each 600-simulated-second window and the cost per
simulated second of the first 600 s against the whole 3,600 s; ``--profile`` adds the top
functions (cProfile, internal time) of the first and the last window, to see what, if anything,
grows.

Run: ``python benchmarks/bench_long_run.py [--seconds 3600] [--sample-interval 0] [--profile]``.
Figures, never asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest

from poolwatch.sidecar.app import build_registry
from rigs.emulated.soak import soak_config
from rigs.emulated.watched import Watched

WINDOW = 600.0


def _window(w: Watched, until: float, profile: bool) -> tuple[float, str]:
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    started = time.perf_counter()
    next_render = w.cluster.clock.now + 15.0
    while w.cluster.clock.now < until and not w.cluster.crashed:
        w.step()
        if w.cluster.clock.now >= next_render:
            next_render += 15.0
            generate_latest(build_registry(w.store, w.now, w.detector_config.stale_after))
    wall = time.perf_counter() - started
    if prof is None:
        return wall, ""
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(8)
    return wall, out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--sample-interval", type=float, default=0.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    windows: list[float] = []
    profiles: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        w = Watched(soak_config("0.5.4.post1", 5), Path(tmp), sample_interval=args.sample_interval)
        end = WINDOW
        while end <= args.seconds:
            last = end + WINDOW > args.seconds
            wall, prof = _window(w, end, args.profile and (end == WINDOW or last))
            windows.append(wall)
            profiles += [prof] if prof else []
            end += WINDOW
        steps, snaps = w.cluster.steps, w.counts.snapshots
    print("| window, simulated s | wall s | ms per simulated s |")
    print("|---|---|---|")
    for i, wall in enumerate(windows):
        print(f"| {i * WINDOW:,.0f}-{(i + 1) * WINDOW:,.0f} | {wall:.1f} | {wall / WINDOW * 1000:.2f} |")
    total = sum(windows)
    first = windows[0] / WINDOW * 1000
    whole = total / (WINDOW * len(windows)) * 1000
    print(
        f"\nfirst 600 s: {first:.2f} ms per simulated s; all {WINDOW * len(windows):,.0f} s: {whole:.2f} ms "
        f"per simulated s (ratio {whole / first:.2f}); wall {total:.1f} s for {total / windows[0]:.1f}x "
        f"the first window's; {steps} scheduler steps, {snaps} snapshots stored."
    )
    for prof in profiles:
        print(prof)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

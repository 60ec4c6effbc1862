"""How often each engine's probe censuses during a growing leak, beside a healthy run (issue 31).

Run ``python benchmarks/bench_census_rate.py`` (or ``scripts/bench census_rate``).  For every engine
in the registry and the reference toy engine, the engine contract's stand-in scheduler
(``rigs/fakes/drivers.py``) runs 10 simulated seconds at the default sample rate (one sample per
0.1 s: the probe's own step hook called once per simulated 0.1 s step), busy, with the default
census intervals; in the leaking run each step leaks a few more slots, so the sample shows a new
gap at every sample.  Printed per engine: samples, census passes, those triggered by a new gap,
and the schedule's bound (one gap-triggered census per ``GAP_CENSUS_EVERY_S``, plus one).  Figures,
not assertions; the time each census costs on a real engine is ``bench_probe_vllm.py``'s and
``bench_probe.py``'s.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.schedule import GAP_CENSUS_EVERY_S
from poolwatch.probe.lifecycle import attach, detach
from rigs.fakes.clock import FakeClock
from rigs.fakes.drivers import DRIVERS, REGISTRY, Driver

SECONDS, STEP = 10.0, 0.1
LEAK_PER_STEP = 2


def run(driver: Driver, *, leak: bool) -> tuple[int, int, int]:
    """(samples, census passes, gap-triggered passes) over SECONDS of simulated busy time."""
    clock = FakeClock(1000.0)  # small numbers: 0.1 s steps add up exactly enough
    config = ProbeConfig(serve=False, directory="/nonexistent-poolwatch-bench", release=driver.release)
    sched = driver.new(driver.cls)
    probe = attach(driver.spec, sched, config, serve=False, clock=clock, wall=clock)
    driver.work(sched, 4)
    samples, censuses = probe.guard.samples_total, probe.census_total
    for _ in range(round(SECONDS / STEP)):
        if leak:
            driver.leak(sched, LEAK_PER_STEP)
        clock.advance(STEP)
        driver.loop(sched)
    out = (probe.guard.samples_total - samples, probe.census_total - censuses, probe.schedule.gap_runs)
    detach(sched)
    return out


def main() -> int:
    bound = 1 + math.floor(SECONDS / GAP_CENSUS_EVERY_S)
    print(f"{SECONDS:.0f} simulated s busy, a step per {STEP} s; a growing leak adds {LEAK_PER_STEP} a step")
    every = f"one per {GAP_CENSUS_EVERY_S:.0f} s, plus one"
    print(f"the schedule's bound: at most {bound} gap-triggered censuses ({every})")
    print()
    print(f"  {'engine':<8} {'run':<13} {'samples':>8} {'censuses':>9} {'by a gap':>9}")
    for entry in REGISTRY:
        driver = DRIVERS[entry.name]
        for label, leak in (("healthy", False), ("growing leak", True)):
            samples, censuses, by_gap = run(driver, leak=leak)
            print(f"  {entry.name:<8} {label:<13} {samples:>8} {censuses:>9} {by_gap:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

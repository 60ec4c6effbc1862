"""SGLang's in-process probe: its cost in the scheduler's loop on real SGLang classes, across
releases, and (``--emulated``) one sample and one census against 16 ... 1,024 live requests of the
emulator.

``python benchmarks/bench_probe.py [--releases 0.5.4.post1,0.5.23] [--seconds 10]`` (or
``scripts/bench probe``) runs :mod:`sglang_loop` once per release, each in that release's cached
venv (a release without one is reported and skipped), and prints one table: a unified rank of a
Mamba hybrid model on the release's own pools, radix tree and ``Req`` objects with 256 live
requests (248 long ones sharing a prefix, 8 short ones replaced as they finish), one turn of the
event loop in SGLang's order (20 ms of made-up GPU time, the batch's result: one decode token each,
releases, admission, then the loop hook where the probe samples); the probe at its default rates
with guard on (``--no-guard``: off, as deployed by default), healthy and during a growing leak (3 KV
slots a step owned by no one).  The share of the thread is the probe's time over the loop's CPU time
plus its GPU waits (:mod:`loop_meter`); the wall-clock share is beside it.

``--emulated``: the earlier table on emulated ranks (real emulator requests on one unified rank,
read by the same probe code): the emulator's iteration is pure Python with no GPU work, so the
overhead on it is a pessimistic bound; a column relates the cost to a 20 ms GPU decode step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach, install, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import collect_live
from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig
from poolwatch_emulator.scheduler import Scheduler

NO_CENSUS = ProbeConfig(
    sample_interval_s=0.0,
    census_interval_s=1e9,
    kv_census_interval_s=1e9,
    idle_kv_census_gap_s=1e9,
    serve=False,
    chunk_tripwire=False,
    release="0.5.4.post1",  # the emulated cluster's release (the probe reads it from its config)
)
GPU_STEP_S = 0.020


@dataclass(frozen=True)
class Row:
    live: int
    sample_us: float
    mamba_census_us: float
    kv_census_us: float
    kv_lost_us: float  # the busy KV census asked to name lost ids (a gap-triggered census)

    @property
    def of_gpu_step(self) -> float:
        return self.sample_us / 1e6 / GPU_STEP_S * 100


def rank_with(live: int, shape: ModelShape | None = None) -> tuple[Cluster, Scheduler]:
    """A unified rank run until it holds ``live`` requests (decode-heavy load); ``shape`` defaults
    to a Mamba-hybrid model with 1,024 KV slots per live request."""
    shape = shape or ModelShape(
        full_kv_tokens=live * 1024, mamba_slots=3 * live + 8, max_running_requests=live, context_len=8192
    )
    load = WorkloadConfig(
        rate=max(live / 4, 4.0),
        prompt_median=200,
        output_median=4000,
        output_sigma=0.2,
        abort_fraction=0.0,
        gap_s=0.0,
        burst_s=1e6,
    )
    cluster = Cluster(
        ClusterConfig(prefill=0, decode=0, unified=1, shape=shape, workload=load, dt=0.05, seed=3)
    )
    rank = cluster.schedulers[0]
    cluster.run_until(lambda: len(rank.running_batch.reqs) >= live, 50_000)
    return cluster, rank


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds of ``fn``: the lower quartile of ``repeat`` runs (the shared 2-core machines
    preempt often; a quartile is a steadier estimate of the uncontended cost than a median)."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


def cost_row(live: int) -> Row:
    _, rank = rank_with(live)
    probe = attach(SGLANG, rank, NO_CENSUS, serve=False)
    reading = Reading()
    held = collect_live(rank, reading, "null")
    try:
        return Row(
            live=len(held.holders),
            sample_us=timed(lambda: probe.sample_now("bench"), 200),
            mamba_census_us=timed(lambda: mamba_census(rank, probe.shape, reading, held, idle=False), 20),
            kv_census_us=timed(lambda: kv_census(rank, probe.shape, reading, held, idle=False), 10),
            kv_lost_us=timed(lambda: kv_census(rank, probe.shape, reading, held, idle=False, lost=1), 10),
        )
    finally:
        detach(rank)


def iteration_seconds(live: int, steps: int, config: ProbeConfig | None) -> float:
    """Mean wall seconds of one rank iteration with the probe installed (or not)."""
    if config is not None:
        install(SGLANG, Scheduler, config)
    try:
        cluster, _ = rank_with(live)
        t0 = time.perf_counter()
        cluster.run_steps(steps)
        return (time.perf_counter() - t0) / steps
    finally:
        if config is not None:
            uninstall(Scheduler)


SGLANG_HOOKS = ("on_loop_boundary", "on_idle", "after_prefill_chunk")


def in_loop(
    live: int = 256, seconds: float = 10.0, gpu_step_s: float = GPU_STEP_S
) -> tuple[int, float, float]:
    """The probe where it runs: ``seconds`` of one emulated rank's loop (each iteration, then a wait
    standing for the GPU's forward pass) at the default rates, its hooks timed from inside.
    ``(iterations, seconds in the probe's hooks, wall seconds)``."""
    cluster, rank = rank_with(live)
    probe = attach(SGLANG, rank, ProbeConfig(serve=False, release="0.5.4.post1"), serve=False)
    spent = [0.0]
    for name in SGLANG_HOOKS:
        original = getattr(probe, name)

        def timed_hook(*args: object, _original: Callable[..., object] = original) -> object:
            t0 = time.perf_counter()
            try:
                return _original(*args)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(probe, name, timed_hook)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        cluster.run_steps(1)
        time.sleep(gpu_step_s)
        steps += 1
    wall = time.perf_counter() - started
    detach(rank)
    return steps, spent[0], wall


HEADER = ("live reqs", "sample µs", "% of 20 ms step", "Mamba census µs", "KV census µs", "KV, lost ids µs")
WIDTHS = (9, 9, 15, 15, 12, 15)


def line(cells: tuple[str, ...]) -> str:
    return " | ".join(f"{c:>{w}}" for c, w in zip(cells, WIDTHS, strict=True))


def emulated() -> int:
    print(line(HEADER))
    print("-|-".join("-" * w for w in WIDTHS))
    cost_at_256 = 0.0
    for live in (16, 64, 256, 1024):
        r = cost_row(live)
        cost_at_256 = r.sample_us if live == 256 else cost_at_256
        cells = (str(r.live), f"{r.sample_us:.0f}", f"{r.of_gpu_step:.3f}%", f"{r.mamba_census_us:.0f}")
        print(line((*cells, f"{r.kv_census_us:.0f}", f"{r.kv_lost_us:.0f}")))
    steps = 300
    bare = iteration_seconds(256, steps, None)
    every = iteration_seconds(256, steps, NO_CENSUS)
    default = iteration_seconds(256, steps, ProbeConfig(serve=False, release="0.5.4.post1"))
    amortised = cost_at_256 / 1e6 / 0.1 * 100
    print("\noverhead at 256 live requests")
    print(f"  one sample every 0.1 s (the default), of scheduler time   {amortised:6.2f} %")
    print("  on emulated iterations (pure Python, no GPU work: a pessimistic bound):")
    print(f"    iteration without the probe         {bare * 1e3:8.3f} ms")
    print(
        f"    sampling every iteration            {every * 1e3:8.3f} ms  ({(every / bare - 1) * 100:+.1f} %)"
    )
    rel = (default / bare - 1) * 100
    print(f"    default settings (0.1 s, censuses)  {default * 1e3:8.3f} ms  ({rel:+.1f} %)")
    steps, spent, wall = in_loop()
    print(f"  in the loop, 10 s (iteration + {GPU_STEP_S * 1e3:.0f} ms GPU wait), default rates:")
    print(f"    {steps} iterations, probe {spent * 1e3:.1f} ms = {spent / wall * 100:.2f} % of the thread")
    return 0


RELEASES = ("0.5.4.post1", "0.5.9", "0.5.23")  # the tiers' release venvs


def real(releases: list[str], seconds: float, guard: bool = True) -> int:
    from loop_meter import GPU_STEP_S
    from loop_report import across, table

    from rigs.sglang.releases import release

    here = Path(__file__).resolve().parent / "sglang_loop.py"
    extra = () if guard else ("--no-guard",)
    results = across(here, releases, lambda v: release(v).venv(), "--seconds", str(seconds), *extra)
    wait = f"{GPU_STEP_S * 1e3:.0f} ms GPU wait"
    mode = "guard on" if guard else "guard off (the default)"
    print(f"\nSGLang in the scheduler's loop: a turn + {wait}, {seconds:.0f} s a case, {mode}")
    for r in results:
        held, locked = r["live_kv"]
        print(f"  {r['release']}: {r['running']} running; full KV: {held} held, {locked} protected")
    print(table(results))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default=",".join(RELEASES), help="comma-separated SGLang releases")
    parser.add_argument("--seconds", type=float, default=10.0, help="of the loop, per case")
    parser.add_argument("--emulated", action="store_true", help="the emulated ranks' table")
    parser.add_argument("--no-guard", action="store_true", help="guard off, as deployed by default")
    args = parser.parse_args()
    if args.emulated:
        return emulated()
    return real([v for v in args.releases.split(",") if v], args.seconds, not args.no_guard)


if __name__ == "__main__":
    sys.exit(main())

"""Emulator throughput: steps per second with 256 live requests, and the wall time of 24
simulated hours of heavy PD load (the fault-free soak the detection tests run).

Run: ``python benchmarks/bench_emulator.py [--hours 24]``.  Prints a small table.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig

# decode-heavy: short prompts, long answers, so the decode rank holds ~256 requests
LIVE_SHAPE = ModelShape(full_kv_tokens=262_144, mamba_slots=1024, max_running_requests=256, context_len=8192)
LIVE_LOAD = WorkloadConfig(
    rate=11.0, prompt_median=200, output_median=500, output_sigma=0.3, abort_fraction=0.01, gap_s=0.0
)
# the soak: one step = 0.5 simulated s; bursts of 15 min, 2 min gaps; decode near its capacity
SOAK_SHAPE = ModelShape(full_kv_tokens=65_536, mamba_slots=384, max_running_requests=128, context_len=8192)
SOAK_LOAD = WorkloadConfig(
    rate=0.32,
    prompt_median=700,
    output_median=120,
    abort_fraction=0.03,
    abort_within_s=60.0,
    transfer_latency_s=0.5,
    burst_s=900.0,
    gap_s=120.0,
)


@dataclass(frozen=True)
class Row:
    what: str
    value: float
    unit: str


def live_steps_per_second(steps: int = 1000) -> list[Row]:
    c = Cluster(ClusterConfig(shape=LIVE_SHAPE, workload=LIVE_LOAD, dt=0.05, seed=1))
    decode = c.by_role("decode")[0].ranks[0]
    c.run_until(lambda: len(decode.running_batch.reqs) >= 256, 20_000)
    live = len(decode.running_batch.reqs)
    t0 = time.perf_counter()
    c.run_steps(steps)
    wall = time.perf_counter() - t0
    return [
        Row("live requests on the decode rank", live, "reqs"),
        Row("cluster steps per second (1P1D, 256 live)", steps / wall, "steps/s"),
        Row("rank iterations per second", steps * len(c.schedulers) / wall, "iter/s"),
    ]


def soak(hours: float) -> list[Row]:
    c = Cluster(ClusterConfig(shape=SOAK_SHAPE, workload=SOAK_LOAD, dt=0.5, seed=2))
    t0, cpu0 = time.perf_counter(), time.process_time()
    c.run_for(hours * 3600.0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done = sum(r.emu_finished_total for r in c.by_role("decode")[0].ranks)
    return [
        Row(f"{hours:g} simulated hours of PD load: wall time", wall, "s"),
        Row("  CPU time (one core)", cpu, "s"),
        Row("  scheduler steps", c.steps, "steps"),
        Row("  requests finished", done, "reqs"),
        Row("  workers crashed (must be 0)", len(c.crashed), ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    print(f"{'measure':<46}  {'value':>12}  unit", flush=True)
    sections: list[Callable[[], list[Row]]] = [
        lambda: live_steps_per_second(args.steps),
        lambda: soak(args.hours),
    ]
    for section in sections:
        for r in section():
            print(f"{r.what:<46}  {r.value:>12,.1f}  {r.unit}", flush=True)


if __name__ == "__main__":
    main()

"""The vLLM probe's cost on vLLM's real Scheduler (CPU) at 256 running requests.

Run inside a real-vLLM venv (scripts/vllm_venv.py)::

    PYTHONPATH=service:. ~/.cache/poolwatch/vllm-venvs/0.33.0/bin/python benchmarks/bench_probe_vllm.py

256 requests with ~1,000-token prompts (a shared 512-token prefix for half of them, so prefix hits
share blocks) decode on vLLM's own Scheduler, KV cache manager and block pool; the model output
of each step is made up (no GPU).  Printed: one cheap sample, one full walk, and the per-free look,
against the scheduler's own CPU time per step and against a 20 ms GPU decode step; and the mean
step with the probe at the default rates vs without it.  Figures, not assertions.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from tests.vllm_real.harness import VERSION, make_request, make_scheduler, step

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.vllm.hooks import attach, detach

LIVE = 256
GPU_STEP_S = 0.020
EVERY = ProbeConfig(
    serve=False, sample_interval_s=0.01, kv_census_interval_s=86_400, idle_kv_census_gap_s=86_400
)
DEFAULT = ProbeConfig(serve=False)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds: the lower quartile of ``repeat`` runs (shared machines preempt often)."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


def loaded() -> object:
    rng = random.Random(0)
    prefix = [rng.randrange(10, 900) for _ in range(512)]
    sched = make_scheduler(24_000, max_running=LIVE, max_tokens=16_384)
    for i in range(LIVE):
        head = prefix if i % 2 else [rng.randrange(10, 900) for _ in range(512)]
        tail = [rng.randrange(10, 900) for _ in range(rng.randrange(400, 600))]
        sched.add_request(make_request(f"r{i}", head + tail, 100_000))
    while len(sched.running) < LIVE or sched.waiting:
        step(sched)
    for _ in range(8):
        step(sched)
    return sched


def mean_step(sched: object, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step(sched)
    return (time.perf_counter() - t0) / steps


def main() -> int:
    sched = loaded()
    pool = sched.kv_cache_manager.block_pool  # type: ignore[attr-defined]
    used = pool.num_gpu_blocks - 1 - pool.free_block_queue.num_free_blocks
    bare = mean_step(sched, 40)
    probe = attach(sched, EVERY, version=VERSION)
    sample = timed(lambda: probe.sample_now("bench"), 100)
    census = timed(lambda: probe.sample_now("bench", census=True), 10) - sample
    blocks = sched.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks["r0"]  # type: ignore[attr-defined]
    look = timed(lambda: probe.on_free(list(blocks)), 200)
    every = mean_step(sched, 40)
    detach(sched)
    probe = attach(sched, DEFAULT, version=VERSION)
    default = mean_step(sched, 40)
    detach(sched)
    rows = (
        ("scheduler's own CPU step (schedule + update, no model)", f"{bare * 1e3:8.2f} ms"),
        ("one sample", f"{sample:8.0f} µs"),
        ("  of a 20 ms GPU decode step", f"{sample / 1e6 / GPU_STEP_S * 100:8.2f} %"),
        ("  amortised at the default rate (one per 0.1 s)", f"{sample / 1e6 / 0.1 * 100:8.3f} %"),
        ("one full walk (off the hot path: idle, 300 s, a new gap)", f"{census:8.0f} µs"),
        (f"the free-time look, one request's {len(blocks)} blocks", f"{look:8.1f} µs"),
        ("step, a sample every step", f"{every * 1e3:8.2f} ms ({(every / bare - 1) * 100:+.1f} %)"),
        ("step, default rates", f"{default * 1e3:8.2f} ms ({(default / bare - 1) * 100:+.1f} %)"),
    )
    running = len(sched.running)  # type: ignore[attr-defined]
    print(f"vLLM {VERSION}: {running} running requests, {used} of {pool.num_gpu_blocks} blocks held")
    for label, value in rows:
        print(f"  {label:<58} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

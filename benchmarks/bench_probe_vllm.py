"""The vLLM probe's cost on vLLM's real Scheduler (CPU) at 256 running requests.

Run ``python benchmarks/bench_probe_vllm.py`` (or ``scripts/bench probe_vllm``): without vLLM
importable it re-runs itself in the cached 0.33.0 venv of scripts/vllm_venv.py (and says so, and
stops, when there is none).

256 requests with ~1,900-token prompts (a shared 512-token prefix for half of them, so prefix hits
share blocks) decode on vLLM's own Scheduler, KV cache manager and block pool: over 25,000 blocks
held; the model output of each step is made up (no GPU).  Printed: one cheap sample, one full walk,
and the per-free look, against the scheduler's own CPU time per step and against a 20 ms GPU decode
step; and the mean step with the probe at the default rates vs without it.

Then *in the loop*, where the probe runs: 10 s of EngineCore's loop (the scheduler's step, then a
20 ms sleep standing for the GPU's forward pass) with the probe attached at the default rates, its
hooks timed from inside (``on_step``, ``after_update``, the free-time look): the probe's share of
the thread, healthy and during a growing leak (a few blocks a step taken and listed by no request,
so every sample shows a new gap), with the walks each run took; and beside it SGLang's probe on an
emulated rank at 256 live requests, measured the same way (``bench_probe.in_loop``).  Figures, not
assertions.
"""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.census import walk_pool
from poolwatch.probe.vllm.engine import VLLM, vllm_release

LIVE = 256
GPU_STEP_S = 0.020
EVERY = ProbeConfig(
    serve=False, sample_interval_s=0.01, kv_census_interval_s=86_400, idle_kv_census_gap_s=86_400
)
DEFAULT = ProbeConfig(serve=False)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # rigs/ (the checkout's root)
RELEASE = "0.33.0"


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds: the lower quartile of ``repeat`` runs (shared machines preempt often)."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


def in_vllm_venv() -> int | None:
    """Re-run in the release venv when vLLM is not importable here; the exit code, or None to go on."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    from rigs.venv import Unavailable
    from rigs.vllm.releases import release

    try:
        release(RELEASE).venv().reexec(Path(__file__))
    except Unavailable as exc:
        print(f"skipped: {exc}")
    return 0


def loaded() -> Any:
    """vLLM's scheduler (:class:`rigs.vllm.engine.Engine`) with ``LIVE`` requests decoding."""
    from rigs.vllm.engine import Engine

    rng = random.Random(0)
    prefix = [rng.randrange(10, 900) for _ in range(512)]
    e = Engine(40_000, max_running=LIVE, max_tokens=32_768, max_model_len=4096)
    for i in range(LIVE):
        head = prefix if i % 2 else [rng.randrange(10, 900) for _ in range(512)]
        tail = [rng.randrange(10, 900) for _ in range(rng.randrange(1_300, 1_500))]
        e.add(f"r{i}", head + tail, 2_000)
    while len(e.sched.running) < LIVE or e.sched.waiting:
        e.step()
    for _ in range(8):
        e.step()
    return e


def mean_step(e: Any, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        e.step()
    return (time.perf_counter() - t0) / steps


HOOKS = ("on_step", "after_update", "on_free")


def _timed(original: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args)
        finally:
            spent[0] += time.perf_counter() - t0

    return timed


def in_loop(e: Any, *, leak: int, seconds: float = 10.0) -> tuple[int, int, float, float]:
    """(steps, walks, seconds inside the probe's hooks, wall seconds) of ``seconds`` of the loop."""
    sched = e.sched
    probe = attach(VLLM, sched, DEFAULT, release=vllm_release(RELEASE))
    spent = [0.0]
    for name in HOOKS:  # the probe's own entry points, as the wrapped scheduler calls them
        setattr(probe, name, _timed(getattr(probe, name), spent))
    pool = sched.kv_cache_manager.block_pool
    walks, steps, started = probe.census_total, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if leak:
            pool.get_new_blocks(leak)  # counted, listed by no request: a leak that keeps growing
        e.step()
        time.sleep(GPU_STEP_S)  # the forward pass: EngineCore's thread waits on the GPU
        steps += 1
    wall = time.perf_counter() - started
    walks = probe.census_total - walks
    detach(sched)
    return steps, walks, spent[0], wall


def sglang_in_loop() -> tuple[int, float, float]:
    """SGLang's probe measured the same way, on an emulated 0.5.4.post1 rank at 256 live requests
    (``bench_probe.in_loop``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_probe import in_loop as sglang_loop

    return sglang_loop(LIVE)


def main() -> int:
    redirected = in_vllm_venv()
    if redirected is not None:
        return redirected
    e = loaded()
    sched = e.sched
    pool = sched.kv_cache_manager.block_pool
    used = pool.num_gpu_blocks - 1 - pool.free_block_queue.num_free_blocks
    bare = mean_step(e, 40)
    probe = attach(VLLM, sched, EVERY, release=vllm_release(RELEASE))
    sample = timed(lambda: probe.sample_now("bench"), 100)
    census = timed(lambda: walk_pool(sched, probe.reader.shape, pool, Reading()), 10)
    blocks = sched.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks["r0"]
    look = timed(lambda: probe.on_free(list(blocks)), 200)
    every = mean_step(e, 40)
    detach(sched)
    probe = attach(VLLM, sched, DEFAULT, release=vllm_release(RELEASE))
    default = mean_step(e, 40)
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
    running = len(sched.running)
    print(f"vLLM {RELEASE}: {running} running requests, {used} of {pool.num_gpu_blocks} blocks held")
    for label, value in rows:
        print(f"  {label:<58} {value}")
    print(f"\nin the loop, 10 s each (step + {GPU_STEP_S * 1e3:.0f} ms GPU wait), default rates:")
    for label, leak in (("healthy", 0), ("growing leak, 3 blocks a step", 3)):
        steps, walks, spent, wall = in_loop(loaded(), leak=leak)
        share = spent / wall * 100
        figures = f"{steps:4d} steps, {walks:3d} walks, probe {spent * 1e3:7.1f} ms"
        print(f"  {label:<32} {figures} = {share:5.2f} % of the thread")
    steps, spent, wall = sglang_in_loop()
    figures = f"{steps:4d} steps, probe {spent * 1e3:7.1f} ms = {spent / wall * 100:5.2f} % of the thread"
    print(f"  {'beside it, SGLang (emulated rank)':<32} {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The vLLM probe's cost on vLLM's real Scheduler (CPU), in EngineCore's loop, across releases.

``python benchmarks/bench_probe_vllm.py [--releases 0.26.0,0.33.0] [--seconds 10]`` (or
``scripts/bench probe_vllm``) runs itself once per release of the real-vLLM probe tier
(``rigs.vllm.releases``), each in that release's cached venv (a release without one is reported and
skipped), and prints one table.

*In the loop*: vLLM's own ``Scheduler``, KV cache manager and block pool (:class:`rigs.vllm.engine.Engine`,
32,000 blocks of 16 tokens, prefix caching on) with 256 running requests: 248 long ones (a shared
1,024-token prefix, then 700-1,000 tokens of their own, decoding for the whole run) and 8 short ones
(200-300-token prompts, 8-24 output tokens) replaced by new ones as they finish.  A *step* is what
EngineCore's thread does per engine step with one batch in flight, in its order: ``schedule()``, a 20 ms
sleep standing for the GPU's forward pass (where ``EngineCore.step`` waits on the model's output), a
made-up model output (one token a request; no model runs), ``update_from_output()``, then the short
requests that finished are replaced.  The probe is attached at the default rates (a sample every 0.1 s,
the walk every 300 s busy or on a new gap) with guard on, so every detector runs beside it (the
free-time tripwire and guard's refusal on every free, freed-in-flight, stranded holds and the admission
stall, the counter witness, the encoder pool).  Nothing else runs in the process.  *Healthy*: nothing is
wrong; *growing leak*: 3 blocks a step are taken from the pool and listed by no request (a gap that
grows at every sample).  Printed per release and case: see :mod:`loop_meter` and :mod:`loop_report`.

``--calls`` prints, on one release, the per-call table of earlier runs: one sample, one walk and the
free-time look back to back, against the scheduler's own step.  Figures, not assertions.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_meter import GPU_STEP_S, Figures, Meter, figures
from loop_report import across, emit, table

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.census import walk_pool
from poolwatch.probe.vllm.engine import VLLM, vllm_release

LIVE = 256
EVERY = ProbeConfig(
    serve=False, sample_interval_s=0.01, kv_census_interval_s=86_400, idle_kv_census_gap_s=86_400
)
DEFAULT = ProbeConfig(serve=False)
GUARDED = ProbeConfig(serve=False, guard=True)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # rigs/ (the checkout's root)
sys.path.insert(0, str(ROOT / "benchmarks"))
RELEASE = "0.33.0"


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds: the lower quartile of ``repeat`` runs (shared machines preempt often)."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


def in_vllm_venv(argv: list[str]) -> int | None:
    """Re-run in the release venv when vLLM is not importable here; the exit code, or None to go on."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    from rigs.venv import Unavailable
    from rigs.vllm.releases import release

    try:
        release(RELEASE).venv().reexec(Path(__file__), argv)
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


HOOKS = ("on_step", "on_scheduled", "after_update", "on_free", "on_pop")
LONG, SHORT, PREFIX = 248, 8, 1_024
CHURN_BLOCKS = 32_000


def churned(seed: int = 0) -> tuple[Any, Callable[[], None]]:
    """The 256-running load: the engine, and what replaces the short requests that finished."""
    from rigs.vllm.engine import Engine

    rng = random.Random(seed)
    prefix = [rng.randrange(10, 900) for _ in range(PREFIX)]
    e = Engine(CHURN_BLOCKS, max_running=LONG + SHORT, max_tokens=16_384, max_model_len=4096)
    for i in range(LONG):
        e.add(f"long{i}", prefix + [rng.randrange(10, 900) for _ in range(rng.randrange(700, 1_000))], 2_000)
    shorts: set[str] = set()
    made = [0]

    def refill() -> None:
        for rid in [r for r in shorts if r not in e.sched.requests]:
            shorts.discard(rid)
        while len(shorts) < SHORT:
            rid = f"short{made[0]}"
            made[0] += 1
            e.add(rid, [rng.randrange(10, 900) for _ in range(rng.randrange(200, 300))], rng.randrange(8, 24))
            shorts.add(rid)

    refill()
    while len(e.sched.running) < LONG + SHORT or e.sched.waiting:
        e.step()
        refill()
    return e, refill


def loop(case: str, leak: int, seconds: float, release: str) -> Figures:
    """``seconds`` of EngineCore's loop over the churned load, the probe attached (default rates,
    guard on) and timed from inside."""
    e, refill = churned()
    sched = e.sched
    probe = attach(VLLM, sched, GUARDED, release=vllm_release(release))
    meter = Meter()
    meter.calibrate()
    meter.wrap(probe, HOOKS)
    probe.close()  # the room's wraps (the pool's free, the pops, schedule) bound the entry points at
    probe.start()  # attach: made again, they call the timed ones, so the free-time look counts too
    meter.clear()
    pool = sched.kv_cache_manager.block_pool
    forward = functools.partial(time.sleep, GPU_STEP_S)  # the forward pass: the thread waits on the GPU

    steps, started, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - started < seconds:
        if leak and pool.get_num_free_blocks() > leak + len(sched.running):  # (to the pool's edge: ~15 s)
            pool.get_new_blocks(leak)  # counted, listed by no request: a leak that keeps growing
        e.step(forward=forward)  # EngineCore's order: schedule, the GPU wait, update_from_output
        refill()
        steps += 1
    wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    meter.stop()
    snap = probe.sample_now("bench")
    account = snap.pools.get(Pool.FULL) if snap is not None else None
    detach(sched)
    return figures(case, meter, steps, wall, cpu, gap(account) if account is not None else None)


def inside(release: str, seconds: float) -> int:
    """One release's rows (run in its venv): printed as one JSON line."""
    rows = [loop("healthy", 0, seconds, release), loop("growing leak, 3/step", 3, seconds, release)]
    e, _ = churned()
    pool = e.sched.kv_cache_manager.block_pool
    held = pool.num_gpu_blocks - 1 - pool.free_block_queue.num_free_blocks
    emit(release, rows, running=len(e.sched.running), held=held)
    return 0


def outside(releases: list[str], seconds: float) -> int:
    from rigs.vllm.releases import release

    results = across(Path(__file__), releases, lambda v: release(v).venv(), "--seconds", str(seconds))
    print(f"\nvLLM in EngineCore's loop: step + {GPU_STEP_S * 1e3:.0f} ms GPU wait, {seconds:.0f} s a case")
    for r in results:
        print(f"  {r['release']}: {r['running']} running, {r['held']} of {CHURN_BLOCKS} blocks held")
    print(table(results))
    return 0


def calls() -> int:
    """The per-call table on :data:`RELEASE` (run in its venv)."""
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
    print(
        f"vLLM {RELEASE}: {len(sched.running)} running requests, {used} of {pool.num_gpu_blocks} blocks held"
    )
    for label, value in rows:
        print(f"  {label:<58} {value}")
    return 0


def main() -> int:
    from rigs.vllm.releases import Tier, tier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--releases", default=",".join(tier(Tier.PROBE)), help="comma-separated vLLM releases"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="of the loop, per case")
    parser.add_argument("--release", help=argparse.SUPPRESS)  # inside a release venv
    parser.add_argument("--calls", action="store_true", help="the per-call table, on " + RELEASE)
    args = parser.parse_args()
    if args.calls:
        redirected = in_vllm_venv(["--calls"])
        return calls() if redirected is None else redirected
    if args.release:
        return inside(args.release, args.seconds)
    return outside([v for v in args.releases.split(",") if v], args.seconds)


if __name__ == "__main__":
    sys.exit(main())

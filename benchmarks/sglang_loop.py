"""SGLang's probe in the scheduler's loop on a release's own classes (run inside its venv by
``bench_probe.py``; see its docstring for the method).

One rank of :mod:`rigs.sglang.driver` -- the release's own ``HybridReqToTokenPool``,
``TokenToKVPoolAllocator`` and radix tree (0.5.23: ``UnifiedRadixCache``), real ``Req`` objects -- with
256 live requests: 248 long ones sharing a 512-token prefix (plus 100-300 tokens of their own) that
decode for the whole run, and 8 short ones (100-200-token prompts, 8-24 output tokens) replaced as they
finish.  A *step* is one turn of the release's event loop, in its order: 20 ms of made-up GPU time (the
forward pass the scheduler waits on), the batch's result (one decode token for every running request),
the release of the finished ones and the admission of new ones (prefix match, row, KV), then the loop
hook (where the probe looks, at its default rate).  Guard's wrappers of SGLang's free paths are timed
with the probe's hooks (:func:`guard_timed`; until 2026-12-06 they were not).  As in SGLang's own loop,
the hook comes right after the result processing has touched every running request; until 2026-12-05 the
hook came right after the GPU wait instead, when those requests were cold (docs/benchmarks.md).

The rank's tensors are CPU tensors here, where SGLang's are on the GPU: the census (a walk) runs
its pool-sized passes on one intra-op thread, as the scheduler thread's own work (the release
venv's environment, :meth:`rigs.venv.Venv.environment`).  With torch's default of one thread per
core, a walk on this 2-core machine took 10x the CPU time of the scheduler's thread whenever
anything else ran (127 vs 10 ms at 422,400 slots, load 1.7): the workers spin waiting for each
other, a cost of the CPU stand-in, not of the walk.  The rank keeps SGLang's ``server_args``, as
the real scheduler does (:meth:`rigs.sglang.driver.Driver.new`; the census reads how far a decode
step allocates past a request's KV there).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from loop_meter import GPU_STEP_S, Figures, Meter, figures
from loop_report import emit

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from rigs.sglang.driver import Driver

LONG, SHORT, PREFIX = 248, 8, 512
HOOKS = ("on_loop_boundary", "on_idle", "after_prefill_chunk")


class Load:
    """The 256-live load on one rank, stepped as the scheduler's loop steps it."""

    def __init__(self, version: str, seed: int = 0, seconds: float = 10.0, guard: bool = True) -> None:
        self.rng = random.Random(seed)
        self.driver = Driver(version, ProbeConfig(serve=False, directory="/nonexistent-poolwatch-dir"))
        live = LONG + SHORT
        steps = int(seconds / GPU_STEP_S) + 50  # a long request grows a token a step, for the whole run
        self.sched = self.driver.new(
            kv=live * (1_100 + steps), mamba=3 * live + 16, rows=live + 16, context=1_100 + steps, guard=guard
        )
        self.prefix = [self.rng.randrange(10, 900) for _ in range(PREFIX)]
        self.shorts: list[Any] = []
        self.sampled = torch.full((LONG + SHORT,), 8, dtype=torch.int64)  # the batch's sampled ids
        self.made = 0
        for i in range(LONG):
            tail = [self.rng.randrange(10, 900) for _ in range(self.rng.randrange(100, 300))]
            self.driver.admit(self.driver.arrive(f"long{i}", self.prefix + tail, 100_000))
        self.refill()

    def refill(self) -> None:
        d = self.driver
        for req in [r for r in self.shorts if len(r.output_ids) >= r.sampling_params.max_new_tokens]:
            self.shorts.remove(req)
            d.finish(req)
        while len(self.shorts) < SHORT:
            ids = [self.rng.randrange(10, 900) for _ in range(self.rng.randrange(100, 200))]
            req = d.arrive(f"short{self.made}", ids, self.rng.randrange(8, 24))
            self.made += 1
            d.admit(req)
            self.shorts.append(req)

    def step(self, leak: int) -> None:
        """One turn after the GPU wait, in the order of SGLang's loop: the last batch's result (the
        sampled ids read to the host, as ``process_batch_result_decode`` reads them with one
        ``tolist()`` in every release run; a token for every running request -- the rig's
        ``decode`` also takes each one's next slot), its finished requests released and new ones
        admitted, then the loop hook of the next turn, where the probe looks at its rate."""
        self.sampled.tolist()
        self.driver.decode()
        if leak:  # taken from the pool and owned by no one: a leak that keeps growing
            self.sched.token_to_kv_pool_allocator.alloc(leak)
        self.refill()
        self.driver.loop()  # the loop hook: the probe looks here, at its rate


@contextlib.contextmanager
def guard_timed(meter: Meter) -> Iterator[None]:
    """Guard's wrappers made while open -- every free path, row and tree hook it patches on the
    rank -- timed as the probe's entry points too, less the SGLang method each wraps."""
    from poolwatch.probe.sglang.guard import patch as patching
    from poolwatch.probe.sglang.guard import refuser  # noqa: F401  (every guard module imported)

    original = patching.patch
    users = [m for n, m in sys.modules.items() if n.startswith(patching.__package__ + ".")]
    users = [m for m in users if getattr(m, "patch", None) is original]

    def timed(owner: Any, name: str, make: Callable[[Any], Any]) -> Any:
        return original(owner, name, lambda method: meter.entry(f"guard {name}", make(meter.engine(method))))

    for module in users:
        vars(module)["patch"] = timed
    try:
        yield
    finally:
        for module in users:
            vars(module)["patch"] = original


def loop(version: str, case: str, leak: int, seconds: float, guard: bool = True) -> Figures:
    meter = Meter()
    meter.calibrate()
    with guard_timed(meter):  # open for the whole run: guard patches some paths at first use
        load = Load(version, seconds=seconds, guard=guard)
        probe = load.driver.probe
        meter.wrap(probe, HOOKS)
        meter.clear()  # (guard's wrappers ran while the load was admitted)
        steps, started, cpu = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - started < seconds:
            time.sleep(GPU_STEP_S)  # the forward pass: the scheduler waits on the GPU
            load.step(leak)
            steps += 1
        wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    meter.stop()
    snap = probe.sample_now("bench")
    account = snap.pools.get(Pool.FULL) if snap is not None else None
    return figures(case, meter, steps, wall, cpu, gap(account) if account is not None else None)


def inside(version: str, seconds: float, guard: bool = True) -> int:
    rows = [
        loop(version, "healthy", 0, seconds, guard),
        loop(version, "growing leak, 3/step", 3, seconds, guard),
    ]
    load = Load(version)
    snap = load.driver.probe.sample_now("bench")
    full = snap.pools[Pool.FULL] if snap is not None else None
    kv = (full.held, full.protected) if full is not None else (None, None)
    emit(version, rows, running=len(load.sched.running_batch.reqs), live_kv=kv)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-guard", action="store_true")
    args = parser.parse_args()
    sys.exit(inside(args.release, args.seconds, not args.no_guard))

"""What vLLM guard (``POOLWATCH_PROBE_GUARD=1``) costs per free, on vLLM's real Scheduler (CPU).

Run ``python benchmarks/bench_guard_vllm.py [RELEASE]`` (or ``scripts/bench guard_vllm``): without
vLLM importable it re-runs itself in the cached venv of that release (0.33.0 by default;
``scripts/vllm_venv.py RELEASE``), and says so, and stops, when there is none.

The scheduler is ``bench_probe_vllm``'s: 256 running requests with ~1,900-token prompts, half of
them sharing a 512-token prefix, on vLLM's own KV cache manager and block pool (over 25,000 blocks
held).  Each figure is one request's free the way vLLM frees it -- its manager's ``free`` (the pop,
then ``free_blocks``) -- timed per call and restored untimed between calls (the list put back and
its blocks re-taken as ``touch`` does), lower quartile of 200 calls, the best of 15 rounds with
the three modes interleaved: with no probe, with the probe (guard off: the free-time tripwire),
and with guard on.  Lists: fresh blocks of 8, 32 and 128 (a request
that shares nothing) and a running request's own list (its first 32 blocks shared with 127 other
requests).  Then the fault path: a double free of 32 blocks, refused (the owners counted over every
list: O(blocks held)), and a premature free of a running request's list.  Figures, not assertions.
"""

from __future__ import annotations

import importlib.util
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # rigs/ (the checkout's root)
DEFAULT_RELEASE = "0.33.0"
ROUNDS = 15  # rounds of CALLS per mode
CALLS = 200


def in_vllm_venv(version: str) -> int | None:
    """Re-run in the release venv when vLLM is not importable here; the exit code, or None to go on."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    from rigs.venv import Unavailable
    from rigs.vllm.releases import release

    try:
        release(version).venv().reexec(Path(__file__), [version])
    except Unavailable as exc:
        print(f"skipped: {exc}")
    return 0


def per_call(call: Callable[[], object], restore: Callable[[], object], calls: int = CALLS) -> float:
    """µs of ``call``, lower quartile over ``calls``, ``restore`` untimed before each."""
    samples = []
    for _ in range(calls):
        restore()
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.quantiles(samples, n=4)[0] * 1e6


class Lists:
    """Requests' lists to free over and over on one loaded scheduler."""

    def __init__(self, sched: Any) -> None:
        self.sched = sched
        self.pool = sched.kv_cache_manager.block_pool
        self.mgr = sched.kv_cache_manager.coordinator.single_type_managers[0]

    def fresh(self, n: int) -> tuple[str, list[Any]]:
        """A request id of no running request, holding ``n`` fresh blocks (it shares nothing)."""
        rid = f"bench-{n}"
        blocks = self.pool.get_new_blocks(n)
        self.mgr.req_to_blocks[rid] = blocks
        return rid, blocks

    def running(self) -> tuple[str, list[Any]]:
        rid = self.sched.running[1].request_id  # odd: one of those sharing the 512-token prefix
        return rid, self.mgr.req_to_blocks[rid]

    def finish(self, rid: str) -> Callable[[], object]:
        return lambda: self.mgr.free(rid)

    def put_back(self, rid: str, blocks: list[Any]) -> Callable[[], object]:
        queue = self.pool.free_block_queue

        def restore() -> None:  # what the pool's touch does (its signature moved between releases)
            if rid not in self.mgr.req_to_blocks:
                for block in blocks:
                    if block.ref_cnt == 0:
                        queue.remove(block)  # 0 -> 1 leaves the free queue; a shared one n-1 -> n
                    block.ref_cnt += 1
                self.mgr.req_to_blocks[rid] = blocks

        return restore


def healthy_rows(sched: Any, attach_probe: Callable[[bool | None], Any]) -> list[tuple[str, list[float]]]:
    lists = Lists(sched)
    cases = [lists.fresh(n) for n in (8, 32, 128)] + [lists.running()]
    rows: list[tuple[str, list[float]]] = []
    for rid, blocks in cases:
        label = f"a finish, {len(blocks)} blocks" + (" (32 shared)" if not rid.startswith("bench") else "")
        restore = lists.put_back(rid, blocks)
        best = [float("inf")] * 3
        for _ in range(ROUNDS):  # the modes interleaved, the best round of each (the load only adds)
            for k, guard in enumerate((None, False, True)):  # no probe, guard off, guard on
                detach = attach_probe(guard)
                best[k] = min(best[k], per_call(lists.finish(rid), restore))
                detach()
        restore()  # the list as it was (the running request's is freed again below)
        rows.append((label, best))
    return rows


def fault_rows(sched: Any, attach_probe: Callable[[bool | None], Any]) -> list[tuple[str, float]]:
    """The refusal path: each call refused whole, so the state it leaves is the state it found."""
    lists = Lists(sched)
    rid, blocks = lists.fresh(32)
    lists.mgr.free(rid)  # the sound free: the blocks are back on the queue at 0
    _, running = lists.running()
    detach = attach_probe(True)
    pool = lists.pool
    double = per_call(lambda: pool.free_blocks(list(reversed(blocks))), lambda: None, 100)
    premature = per_call(lambda: pool.free_blocks(list(reversed(running))), lambda: None, 100)
    detach()
    return [
        ("a double free of 32 blocks", double),
        (f"a premature free of a running request's {len(running)} blocks", premature),
    ]


def main() -> int:
    release = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_RELEASE
    redirected = in_vllm_venv(release)
    if redirected is not None:
        return redirected
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_probe_vllm import loaded

    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.lifecycle import attach, detach

    logging.getLogger("poolwatch.probe").setLevel(logging.ERROR)  # a refusal logs a line each time
    from poolwatch.probe.vllm.engine import VLLM, vllm_release

    sched = loaded().sched
    pool = sched.kv_cache_manager.block_pool
    held = pool.num_gpu_blocks - 1 - pool.free_block_queue.num_free_blocks

    def attach_probe(guard: bool | None) -> Any:
        """Attach a probe (``guard``: its setting; None: no probe); returns its detach."""
        probe = None
        if guard is not None:
            config = ProbeConfig(serve=False, guard=guard)
            probe = attach(VLLM, sched, config, release=vllm_release(release))

        def undo() -> None:
            if probe is not None:
                detach(sched)

        return undo

    print(
        f"vLLM {release}: {len(sched.running)} running requests, {held} of {pool.num_gpu_blocks} blocks held"
    )
    head = ("no probe", "guard off", "guard on", "guard adds")
    print(f"  {'µs per free (lower quartile)':<40} {head[0]:>9} {head[1]:>10} {head[2]:>9} {head[3]:>10}")
    for label, (bare, off, on) in healthy_rows(sched, attach_probe):
        print(f"  {label:<40} {bare:9.1f} {off:10.1f} {on:9.1f} {on - off:+10.1f}")
    print("  the fault path, guard on: refused (owners counted over every list)")
    for label, cost in fault_rows(sched, attach_probe):
        print(f"  {label:<60} {cost:9.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

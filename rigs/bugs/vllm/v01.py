"""V01 (#42571): eager SimpleCPUOffload with a sliding-window group stores one GPU block twice in
one store event, and the store's completion frees it twice in one ``free_blocks`` call; the
two-pass free of 0.19.1 to 0.23.x queues it twice, so the free queue counts a block it does not
hold, and a later allocation drains the list into its tail sentinel (vLLM's own assert).

vLLM's own ``Scheduler`` and ``SimpleCPUOffloadConnector`` scheduler side (full attention plus a
48-token window sharing one 16-block GPU pool, a 4-block host pool); the worker is stood in for:
each store event is reported complete eight steps after it was issued (a slow host copy), as the
connector's worker metadata.  One 129-token request chunked at 32 tokens keeps the host pool full
while window blocks leave it and come back, so a later scan lists a block twice; when its store
completes, one request needing all 16 blocks is admitted on the inflated count.  From 0.24.0
``free_blocks`` frees in one pass, and the duplicate touch and free balance: the control.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import affected, free_queue, patched, record, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V01",
    engine="vllm",
    title="SimpleCPUOffload + sliding window: one block stored twice, then queued free twice",
    issue="https://github.com/vllm-project/vllm/issues/42571",
    fix="https://github.com/vllm-project/vllm/pull/42615",
    bug_class="double-free",
    affected="0.23.0",
    fixed="0.24.0",
    trigger="the eager offload scan lists a re-allocated window block twice; its store's end frees it twice",
)
BLOCKS, HOST_BLOCKS, HOLD, WINDOW = 16, 4, 8, 48


def run(release: str) -> dict[str, Any]:
    from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler

    make = (lambda scan: scan) if affected(release) else _deduped
    with patched(SimpleCPUOffloadScheduler, "_prepare_eager_store_specs", make):
        return _run(release)


def _run(release: str) -> dict[str, Any]:
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadWorkerMetadata

    from rigs.vllm.configs import Groups

    page = 2 * 16 * 16 * 4  # a block of one group: K and V, 16 tokens, 16 floats (kv_cache_config)
    connector = {
        "kv_connector": "SimpleCPUOffloadConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": HOST_BLOCKS * page * 2},
    }
    e, timeline = started(BLOCKS, max_running=4, max_tokens=32, max_model_len=1024, connector=connector,
        groups=Groups(window=WINDOW, tensors=True),
    )  # fmt: skip
    pool = e.sched.kv_cache_manager.block_pool
    workers = e.sched.connector.scheduler_manager._expected_worker_count
    e.add("R", [10 + i for i in range(129)], 40)
    stores: dict[int, tuple[int, list[int]]] = {}  # event -> (the step it completes, its GPU blocks)
    done: dict[int, int] = {}
    loaded = False
    listed_twice: list[int] = []
    for _ in range(120):
        with contextlib.suppress(AssertionError):  # vLLM's own assert (on the timeline) ends the run
            out = e.step(worker_meta=SimpleCPUOffloadWorkerMetadata(completed_store_events=done))
        meta = out.kv_connector_metadata
        event = getattr(meta, "store_event", -1)
        if event >= 0:
            gpu = list(getattr(meta, "store_gpu_blocks", ()))
            stores[event] = (e.steps + HOLD - 1, gpu)
            listed_twice += [b for b, n in Counter(gpu).items() if n > 1]
        done = {ev: workers for ev, (at, _) in stores.items() if at <= e.steps}
        for ev in done:
            stores.pop(ev)
        if timeline.wrong_act is None and pool.free_block_queue.num_free_blocks != len(free_queue(pool)):
            timeline.wrong(e.steps, f"free_blocks queued block(s) {sorted(set(listed_twice))} twice")
        if timeline.engine is not None:
            break
        if not e.sched.requests and not stores and not done:
            if loaded:
                break
            loaded = True  # every block vLLM believes free, asked for at once
            e.add("L", [300 + i for i in range(148)], 30)
    return record(timeline, release, listed_twice=sorted(set(listed_twice)))


def _deduped(scan: Any) -> Any:
    """The control on the affected release (the open fixes' idea): one store event never lists a
    GPU block twice -- a repeat gives back its extra touch and its host block."""

    def fixed(self: Any, scheduler_output: Any) -> Any:
        gpu, cpu, reqs = scan(self, scheduler_output)
        seen: set[int] = set()
        keep_gpu, keep_cpu = [], []
        for g, c in zip(gpu, cpu, strict=True):
            if g in seen:
                self._gpu_block_pool.blocks[g].ref_cnt -= 1
                self.cpu_block_pool.free_blocks([self.cpu_block_pool.blocks[c]])
                continue
            seen.add(g)
            keep_gpu.append(g)
            keep_cpu.append(c)
        return keep_gpu, keep_cpu, reqs

    return fixed

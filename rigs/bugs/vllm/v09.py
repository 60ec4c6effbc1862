"""V09 (#49674): async scheduling with a KV-consumer connector, so a free waits for the step in
flight (``deferred_frees``).  When a running request cannot grow, the scheduler preempts a victim
and retries; the victim's blocks only join the deferred queue, no capacity appears, and the retry
preempts the next victim -- cascades that preempt several requests in one schedule and free
nothing, each victim recomputed from scratch.  No error; throughput falls.

vLLM's own ``AsyncScheduler`` (two steps in flight, stepped as EngineCore's batch queue) with its
own ``NixlConnector`` scheduler side (``kv_consumer``), 40 blocks; eight local 48-token requests of
150 tokens each.  0.30.0 stops the retry when the victim's blocks cannot be freed now: the control.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import record, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V09",
    engine="vllm",
    title="async + KV consumer: preemption retries cascade over victims whose frees are fenced",
    issue="https://github.com/vllm-project/vllm/issues/49674",
    fix="https://github.com/vllm-project/vllm/pull/49675",
    bug_class="stall",
    affected="0.29.0",
    fixed="0.30.0",
    trigger="8 requests outgrow 40 blocks under async scheduling with NixlConnector consumer (fenced frees)",
)
REQUESTS, TOKENS = 8, 150


def run(release: str) -> dict[str, Any]:
    connector = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
    e, timeline = started(40, max_running=8, max_tokens=256, batch_queue=2, connector=connector)
    for i in range(REQUESTS):
        e.add(f"R{i}", [30 + 50 * i + j for j in range(48)], TOKENS)
    preemptions = cascades = 0
    stalled: list[int] = []  # steps that scheduled nothing with requests waiting
    while e.sched.requests and e.steps < 600:
        out = e.step()
        victims = sorted(getattr(out, "preempted_req_ids", None) or ())
        preemptions += len(victims)
        if len(victims) >= 2:
            cascades += 1
            timeline.wrong(e.steps, f"one schedule preempted {victims}, their blocks fenced: nothing freed")
        if out.total_num_scheduled_tokens == 0 and e.sched.waiting:
            stalled.append(e.steps)
    e.settle()
    return record(
        timeline, release, preemptions=preemptions, cascade_steps=cascades,
        steps_scheduling_nothing=stalled[:8],
        finished=REQUESTS - len(e.sched.requests), steps=e.steps,
    )  # fmt: skip

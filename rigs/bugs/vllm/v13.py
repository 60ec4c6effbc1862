"""V13 (PR #43433): with a connector that keeps a finished request's blocks for a transfer
(``delay_free``), the engine stops stepping once the last request finishes: the scheduler says it
has no requests while that request still holds its blocks, and the worker's report that the
transfer finished comes only inside a step's output.  The blocks stay held until some new request
wakes the engine.  No error; the books balanced.

vLLM's own ``Scheduler`` with its own ``NixlConnector`` scheduler side, prefill role
(``kv_producer``), 40 blocks.  One 100-token request with remote-decode parameters finishes after
its prefill and is kept for the decode to read, which it does three steps later (the worker's
report, stood in for).  The loop is EngineCore's busy loop: step while the scheduler has requests,
else wait for input -- here ``IDLE_S`` of engine time (the probe's idle snapshot re-stamped by its
keepalive each 0.1 s, one timeline step each), until a new request arrives.  0.22.0 counts a
request kept for a transfer as work, so the engine steps on and sees the report: the control.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import blocks_of, record, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V13",
    engine="vllm",
    title="delay-free connector: the engine idles after the last finish, the kept blocks unreleased",
    issue="https://github.com/vllm-project/vllm/pull/43433",
    fix="https://github.com/vllm-project/vllm/pull/43433",
    bug_class="stranded",
    affected="0.21.0",
    fixed="0.22.0",
    trigger="NixlConnector producer: the only request finishes at its prefill; its send reported 3 steps on",
)
TRANSFER_STEPS = 3  # the decode reads the prefill's KV this many engine steps after the finish
IDLE_S = 900.0  # how long the engine waits for input before a new request wakes it


def run(release: str) -> dict[str, Any]:
    from poolwatch.probe.lifecycle import probe_of

    e, timeline = started(
        40,
        max_running=8,
        max_tokens=256,
        connector={"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
    )
    e.add(
        "P1", [10 + i for i in range(100)], 1, transfer={"do_remote_decode": True, "do_remote_prefill": False}
    )
    finished = _busy_loop(e, None)
    held = sorted(blocks_of(e.sched, "P1"))
    if held:
        timeline.wrong(
            e.steps + 1, f"the engine idles with P1's blocks {held} kept for a transfer it cannot see end"
        )
    probe = probe_of(e.sched)
    for _ in range(int(IDLE_S / timeline.seconds_per_step)):
        e.steps += 1  # the loop's turns while it waits count as its steps (the engine's clock runs)
        if probe is not None:
            probe.refresh_idle(quiet_s=0.0)
            timeline.look(e.steps, probe.latest)
    e.add("N1", [600 + i for i in range(20)], 2)  # a new request wakes the engine
    _busy_loop(e, finished)
    return record(timeline, release, held_while_idle=held, released=not blocks_of(e.sched, "P1"))


def _busy_loop(e: Any, finished: int | None) -> int | None:
    """EngineCore's busy loop: step while the scheduler has requests.  The step P1 finished at."""
    while e.sched.has_requests() and e.steps < 100_000:
        due = finished is not None and e.steps >= finished + TRANSFER_STEPS and "P1" in e.sched.requests
        e.step(sent={"P1"} if due else ())
        request = e.sched.requests.get("P1")
        if finished is None and request is not None and request.is_finished():
            finished = e.steps
    return finished

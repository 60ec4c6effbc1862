"""V07 (vllm-ascend #14055, fixed by vLLM PR #45357): async scheduling with a KV-consumer
connector.  A request aborted while the step that lists it is still in flight gets its blocks
back on the free queue at once; the next schedule hands them to a request whose remote KV load
writes into them while the in-flight step may still write them too.  Silent KV corruption, the books balanced.

vLLM's own ``AsyncScheduler`` (async scheduling on: two steps in flight, stepped as EngineCore's
batch queue) with its own ``NixlConnector`` scheduler side (``kv_consumer``), a 16-block pool.  F
and R run into decode; R is aborted with its step in flight; L arrives with remote-prefill
parameters.  0.24.0 fences the free (``deferred_frees``) until the step's output is applied: the
control.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import blocks_of, record, remote_prefill, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V07",
    engine="vllm",
    title="async + KV consumer: an aborted request's blocks re-allocated while its step is in flight",
    issue="https://github.com/vllm-project/vllm-ascend/issues/14055",
    fix="https://github.com/vllm-project/vllm/pull/45357",
    bug_class="freed-in-flight",
    affected="0.23.0",
    fixed="0.24.0",
    trigger="abort with its step in flight (async, NixlConnector consumer); a remote load takes the blocks",
)


def run(release: str) -> dict[str, Any]:
    connector = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
    e, timeline = started(16, max_running=8, max_tokens=128, batch_queue=2, connector=connector)
    pool = e.sched.kv_cache_manager.block_pool
    listed: dict[int, dict[int, str]] = {}  # in-flight step's output -> {block: the request it lists it for}
    e.add("F", [500 + i for i in range(150)], 60)
    e.add("R", [20 + i for i in range(40)], 60)
    for _ in range(12):
        _step(e, listed)
    e.abort(["R"])  # the client disconnects; the step listing R is still in flight
    in_flight = _in_flight(e, listed)
    freed = sorted(b for b, r in in_flight.items() if r == "R" and pool.blocks[b].ref_cnt == 0)
    if freed:
        timeline.wrong(e.steps + 1, f"R's blocks {freed} back on the free queue with its step in flight")
    e.add("L", [700 + i for i in range(60)], 4, transfer=remote_prefill("L", 4))
    taken: list[int] = []
    for _ in range(4):
        in_flight = _in_flight(e, listed)
        _step(e, listed)
        taken = taken or sorted(b for b, r in in_flight.items() if r == "R" and b in blocks_of(e.sched, "L"))
    e.settle()
    return record(timeline, release, freed_in_flight=freed, load_destinations_reused=taken)


def _step(e: Any, listed: dict[int, dict[int, str]]) -> None:
    out = e.step()
    listed[id(out)] = {b: rid for rid in out.num_scheduled_tokens for b in blocks_of(e.sched, rid)}


def _in_flight(e: Any, listed: dict[int, dict[int, str]]) -> dict[int, str]:
    """The blocks the steps still in flight list, and for whom."""
    return {b: r for out, _ in e.pending for b, r in listed.get(id(out), {}).items()}

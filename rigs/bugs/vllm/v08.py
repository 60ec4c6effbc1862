"""V08 (#47282): async scheduling with speculative decoding and a sliding-window group.  The
scheduler drops the blocks that left the window (``remove_skipped_blocks``) on the optimistic
token count, which already counts the in-flight step's drafts; when the worker rejects the drafts
the request's real frontier rolls back below a block already nulled and freed, and the next steps
attend over the null block (or over a block someone else now holds).  Silent, the books balanced.

vLLM's own ``AsyncScheduler`` (two steps in flight, stepped as EngineCore's batch queue) with
n-gram speculative decoding (three drafts a step, the scheduler's own placeholders; no drafter
runs), full attention plus a 32-token window, 64 blocks; the worker accepts no draft.  One
40-token request decodes.  0.26.0 drops blocks on the processed count (``num_in_flight_tokens``):
the control.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import record, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V08",
    engine="vllm",
    title="async + spec decode + sliding window: blocks dropped on the optimistic count, drafts rejected",
    issue="https://github.com/vllm-project/vllm/issues/47282",
    fix="https://github.com/vllm-project/vllm/pull/47728",
    bug_class="freed-in-flight",
    affected="0.25.1",
    fixed="0.26.0",
    trigger="async scheduling, 3 n-gram drafts a step, a 32-token window; every draft rejected",
)
WINDOW = 32


def run(release: str) -> dict[str, Any]:
    from rigs.vllm.configs import Groups

    e, timeline = started(
        64, max_running=4, max_tokens=256, batch_queue=2, drafts=3, groups=Groups(window=WINDOW)
    )
    window = e.sched.kv_cache_manager.coordinator.single_type_managers[1]
    e.add("R", [10 + i for i in range(40)], 80)
    found = 0
    while "R" in e.sched.requests and e.steps < 120:
        e.step()
        nulls = _nulls_in_window(e, window)
        if nulls:
            found += 1
            timeline.wrong(
                e.steps, f"R's window block(s) {nulls} dropped though rejected drafts rolled it back"
            )
    e.settle()
    return record(timeline, release, looks_with_a_null_in_the_window=found)


def _nulls_in_window(e: Any, window: Any) -> list[int]:
    """The positions of R's window list that are null though the tokens its next query attends to
    (the last ``WINDOW`` the worker has processed) lie in them."""
    request = e.sched.requests.get("R")
    if request is None:
        return []
    from rigs.vllm.configs import BLOCK

    in_flight = sum(out.num_scheduled_tokens.get("R", 0) for out, _ in e.pending)
    processed = request.num_computed_tokens - in_flight
    first = max(0, processed - WINDOW + 1)
    blocks = window.req_to_blocks.get("R", [])
    return [
        i for i, b in enumerate(blocks) if b.is_null and (i + 1) * BLOCK > first and i * BLOCK < processed
    ]

"""S04: a waiting request that holds a copy-on-write Mamba slot is dropped by the waiting-queue
timeout (#20010, #20069 -> PR #21404).

The batch builder's prefix match forks a COW Mamba slot for a waiting request and the
``PrefillAdder`` refuses it; the request keeps the slot while it waits.  On 0.5.5 - 0.5.9 the
scheduler's waiting timeout (``SGLANG_REQ_WAITING_TIMEOUT``; likewise the priority queue's limit)
filters the request out of the queue and only tells the tokenizer: the slot is owned by nobody,
and the idle check raises.  0.5.10 frees the COW slot when the adder refuses the request, so no
waiting request holds one when the timeout drops it.
"""

from __future__ import annotations

import os
from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S04",
    engine="sglang",
    title="waiting-queue timeout leaks a waiting request's copy-on-write Mamba slot",
    issue="https://github.com/sgl-project/sglang/issues/20010",
    fix="https://github.com/sgl-project/sglang/pull/21404",
    bug_class="leak",
    affected="0.5.9",
    fixed="0.5.10",
    trigger="_abort_on_waiting_timeout drops a waiting request the adder refused, its match's COW slot held",
)

TIMEOUT_S = 5  # SGLANG_REQ_WAITING_TIMEOUT


def run(release: str) -> dict[str, Any]:
    os.environ["SGLANG_REQ_WAITING_TIMEOUT"] = str(TIMEOUT_S)
    from rigs.bugs.sglang.flows import cow_waiting, drain, turn
    from rigs.timeline import Timeline

    timeline = Timeline()
    d, w, slot = cow_waiting(release, timeline)
    step = turn(d)
    d.expire(w, waited_s=12 * TIMEOUT_S)  # the trigger: SGLang's own waiting-timeout abort
    gone = w not in d.sched.waiting_queue
    struck = gone and slot is not None and slot not in d.mamba_free.free_slots.tolist()
    if struck:
        timeline.wrong(step, f"the waiting timeout drops request w, its COW Mamba slot {slot} with it")
    drain(d)
    return outcome(release, struck, {**timeline.row(), "dropped": gone})

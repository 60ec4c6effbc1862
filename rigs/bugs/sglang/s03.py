"""S03: a client aborts a waiting request that holds a copy-on-write Mamba slot (PR #12693).

The batch builder's prefix match forks the matched node's Mamba state into a new slot for the
request (copy on write); the ``PrefillAdder`` has no room, so the request stays waiting, holding the
slot.  On 0.5.4.post1 ``abort_request`` pops a waiting request and frees nothing (only a PD decode
rank releases KV there): the slot is owned by nobody, and SGLang's idle check raises once the loop
is idle.  0.5.5 releases the request through the tree (``cache_finished_req(is_insert=False)``),
which frees a row-less request's Mamba slot.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S03",
    engine="sglang",
    title="abort of a waiting request leaks its copy-on-write Mamba slot",
    issue="https://github.com/sgl-project/sglang/pull/12693",
    fix="https://github.com/sgl-project/sglang/pull/12693",
    bug_class="leak",
    affected="0.5.4.post1",
    fixed="0.5.5",
    trigger="abort_request on a waiting request whose prefix match forked a COW Mamba slot",
)


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import cow_waiting, drain, turn
    from rigs.timeline import Timeline

    timeline = Timeline()
    d, _, slot = cow_waiting(release, timeline)
    step = turn(d)
    d.abort("w")  # the trigger: SGLang's own abort_request
    struck = slot is not None and slot not in d.mamba_free.free_slots.tolist()
    if struck:
        timeline.wrong(step, f"abort_request drops waiting request w, its COW Mamba slot {slot} with it")
    drain(d)
    return outcome(release, struck, timeline.row())

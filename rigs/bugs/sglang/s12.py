"""S12: the PD decode side's KV offload never gives back a finished request's protected count
(PR #12774).

With ``--disaggregation-decode-enable-offload-kvcache`` the decode rank's ``ChunkCache`` counts a
transferred request's KV as protected when it joins the batch (``process_prebuilt``).  When the
request finishes its KV is copied to host, and on 0.5.4.post3 - 0.5.5.post2 the offload manager
then frees the KV and the row itself -- around the tree -- and never takes the request's share out
of ``protected``: every slot is back on the free list, but the counter says they are protected.  A
counter bug: the slots are fine, and SGLang's idle check raises on the counters.  0.5.5.post3
subtracts the share when it releases the request.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S12",
    engine="sglang",
    title="decode KV offload leaves a finished request's KV counted as protected",
    issue="https://github.com/sgl-project/sglang/pull/12774",
    fix="https://github.com/sgl-project/sglang/pull/12774",
    bug_class="counter",
    affected="0.5.5.post2",
    fixed="0.5.5.post3",
    trigger="the offload manager releases a finished PD decode request after its device-to-host copy",
)

SERVER = {"disaggregation_mode": "decode", "disaggregation_decode_enable_offload_kvcache": True}


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import decoded_then_offloaded, idle, prefilled
    from rigs.sglang.driver import Driver
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("decode", kv=256, rows=4, context=512, dense="chunk", pre_alloc=8, server=SERVER)
    d.open_offload()
    r = prefilled(d, "r", list(range(100, 140)), max_new=3)
    step = decoded_then_offloaded(d, r)  # the trigger: the copy done, the release frees the request
    tree = d.sched.tree_cache
    drift = int(tree.protected_size())
    intact = d.sched.token_to_kv_pool_allocator.available_size() == d.sched.max_total_num_tokens
    if drift and intact:
        timeline.wrong(
            step, f"the released request's {drift} slots stay counted as protected, all of them free"
        )
    idle(d)
    return outcome(release, bool(drift) and intact, {**timeline.row(), "protected_after": drift})

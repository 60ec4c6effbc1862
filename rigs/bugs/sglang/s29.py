"""S29: the PD decode side's incremental KV offload frees a request's KV while it still decodes
(PR #24226; first reported in PR #24063).  Not in the zoo's list: poolwatch's own clean long runs
found it, once the rig drove 0.5.10's offload the way its loop does.

With ``--disaggregation-decode-enable-offload-kvcache``, 0.5.10 - 0.5.12 copy a decoding request's
new KV to host at every decode step (the output processor calls ``offload_kv_cache`` for unfinished
requests too).  The first copy frees the request's prompt slots on the spot (the prefill rank has
already stored them), and the copy's acknowledgement (``check_offload_progress``, at the start of
the next ``process_decode_queue``) frees the copied slots of a request that is not finished.  The
request keeps attending to all of them through its ``req_to_token`` row, and the next request's
allocation reuses them: another request's KV is written under it (PR #24063 saw about 5 % of
responses collapse into a peer's prompt).  The books balance at the end -- the release frees only
the tail -- so SGLang's idle check never says anything.  0.5.13 frees nothing before the request
finishes and no copy of it is in flight.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S29",
    engine="sglang",
    title="decode KV offload frees a decoding request's KV while it still attends to it",
    issue="https://github.com/sgl-project/sglang/pull/24063",
    fix="https://github.com/sgl-project/sglang/pull/24226",
    bug_class="double-free",
    affected="0.5.12",
    fixed="0.5.13",
    trigger="the decode loop offloads a running request's KV; the offload frees the prompt, the ack the copy",
)

SERVER = {"disaggregation_mode": "decode", "disaggregation_decode_enable_offload_kvcache": True}
PROMPT = list(range(100, 140))


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle, landed, prefilled, turn
    from rigs.sglang.driver import Driver
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("decode", kv=256, rows=4, context=512, dense="chunk", pre_alloc=8, server=SERVER)
    d.open_offload()
    r = prefilled(d, "r", PROMPT, max_new=6)
    landed(d, r)
    step, struck = turn(d), False
    d.decode_one(r)  # the trigger: the loop offloads the running request's first new token
    early = _freed_rows(d, r)
    if early:
        struck = True
        timeline.wrong(step, f"the offload frees {len(early)} slots r still decodes over ({early[:4]}...)")
    d.loop()
    d.offload_done()  # the next turn's process_decode_queue acknowledges the copy
    late = _freed_rows(d, r)[len(early) :]
    if late:
        timeline.wrong(turn(d), f"the copy's acknowledgement frees {len(late)} more of r's decoding slots")
    attended = len(_freed_rows(d, r))  # still decoding, still reading all of them
    while not d.decode_one(r):
        d.loop()
        d.offload_done()
    d.loop()
    d.offload_done()
    idle(d)
    return outcome(release, struck, {**timeline.row(), "freed_while_decoding": attended})


def _freed_rows(d: Any, r: Any) -> list[int]:
    """The slots of ``r``'s row (up to what it has allocated) that are on the free list."""
    from rigs.bugs.sglang.flows import free_ids

    free = free_ids(d.sched.token_to_kv_pool_allocator)
    row = d.sched.req_to_token_pool.req_to_token[r.req_pool_idx, : d.record(r).kv_allocated_len].tolist()
    return [s for s in row if s in free]

"""S18: a streaming session's first turn, aborted mid-flight, orphans its Mamba slot and its two
ping-pong track slots (PR #26941).

With the Mamba ``extra_buffer`` strategy a request holds three Mamba slots (its working slot and two
ping-pong track slots).  When a streaming session's first turn is aborted while it runs, the
session keeps its row, KV and lock in an ephemeral slot so they can be released together; on 0.5.11
- 0.5.12 that slot carries no Mamba state, so releasing it frees KV, row and lock and leaves the
three Mamba slots owned by nobody (the request's own release returns early: its row is gone), and
the idle check raises.  0.5.13 gives the ephemeral slot the request's Mamba slots.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S18",
    engine="sglang",
    title="an aborted first streaming turn orphans its Mamba and ping-pong slots",
    issue="https://github.com/sgl-project/sglang/pull/26941",
    fix="https://github.com/sgl-project/sglang/pull/26941",
    bug_class="leak",
    affected="0.5.12",
    fixed="0.5.13",
    trigger="a streaming session's first request aborted mid-flight, released through the session cache",
)

SERVER = {
    "enable_streaming_session": True,
    "mamba_scheduler_strategy": "extra_buffer",
    "_mamba_cache_chunk_size": 64,  # what the property would read from the model's config
}


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle, turn
    from rigs.sglang.driver import Driver
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("null", kv=256, mamba=16, rows=8, context=512, extra_buffer=True, server=SERVER)
    d.open_sessions()
    d.open_session("sess")
    t1 = d.turn("sess", "t1", list(range(30)))
    d.admit(t1)
    owned = _slots(t1)
    d.loop()
    d.decode()
    d.loop()
    step = turn(d)
    d.finish(t1, abort=True)  # the trigger: the client goes away, the request is released
    free = set(d.mamba_free.free_slots.tolist())
    lost = [slot for slot in owned if slot not in free and slot not in d.session_mamba()]
    if lost:
        timeline.wrong(step, f"the aborted turn's Mamba slots {lost} are owned by nobody")
    idle(d)
    return outcome(release, bool(lost), {**timeline.row(), "slots_of_the_turn": len(owned)})


def _slots(req: Any) -> list[int]:
    refs = (req.mamba_pool_idx, getattr(req, "mamba_ping_pong_track_buffer", None))
    return [int(i) for ref in refs if ref is not None for i in ref.reshape(-1).tolist()]

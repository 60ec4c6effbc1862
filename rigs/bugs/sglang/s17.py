"""S17: closing a streaming session leaks the Mamba slot its session slot held (PR #23496).

A streaming session keeps a finished turn's row, KV and Mamba working slot for the next turn.  On
0.5.10 (the first release with streaming sessions) closing the session releases the KV tail, the
lock and the row but never the slot's Mamba slot: it is owned by nobody, and the idle check raises.
And while a session is open, 0.5.10's own idle check counts no session-held Mamba slot, so the
strict idle check fails a healthy pool (``engine_with_session_open``).  0.5.11 frees the slot's
Mamba state on release and counts session-held Mamba slots.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S17",
    engine="sglang",
    title="closing a streaming session leaks its Mamba slot",
    issue="https://github.com/sgl-project/sglang/pull/23496",
    fix="https://github.com/sgl-project/sglang/pull/23496",
    bug_class="leak",
    affected="0.5.10",
    fixed="0.5.11",
    trigger="SessionController.close on a Mamba hybrid rank after a streaming turn finished",
)


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle, turn
    from rigs.sglang.driver import Driver
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("null", kv=256, mamba=16, rows=8, context=512, server={"enable_streaming_session": True})
    d.open_sessions()
    d.open_session("sess")
    t1 = d.turn("sess", "t1", list(range(30)))
    d.admit(t1)
    d.loop()
    d.decode()
    d.finish(t1)  # the session slot keeps the row, the KV and the Mamba slot
    d.loop()
    open_check = d.idle_leak()  # SGLang's own idle check with the session open (a healthy pool)
    held = d.session_mamba()
    step = turn(d)
    d.close_session("sess")  # the trigger: SGLang's own close -> release_session
    free = set(d.mamba_free.free_slots.tolist())
    lost = [slot for slot in held if slot not in free]
    if lost:
        timeline.wrong(step, f"closing the session leaves Mamba slots {lost} owned by nobody")
    idle(d)
    extra = {"engine_with_session_open": open_check.strip().splitlines()[0][:160] if open_check else ""}
    return outcome(release, bool(lost), {**timeline.row(), **extra})

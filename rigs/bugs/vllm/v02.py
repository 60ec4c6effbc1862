"""V02 (#46283): a P/D decode worker with NixlPushConnector.  A request aborted while it waits for
its remote KV (``WAITING_FOR_REMOTE_KVS``) keeps its blocks until the worker reports the receive
finished; when the prefill side died, nothing ever reports it, and the blocks are held for the
engine's life -- the books balanced, the engine stepping with nothing to do.

vLLM's own ``Scheduler`` and ``NixlPushConnector`` scheduler side (``kv_consumer``; no NIXL agent:
the worker's report is stood in for, as vLLM's connector unit tests do).  A and B arrive with
remote-prefill parameters; A's KV lands at step 2, when B's client disconnects; B's prefill never
answers.  The run goes on for ``HORIZON_S`` of engine time (longer than the connector's own 480 s
decode TTL).  No release reclaims the blocks (the fix is open); the control is the affected
release with the fix's idea applied: a request aborted while waiting for remote KV is freed
through the scheduler's own path once a grace passes with no report, and a late report ignored.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug
from rigs.bugs.vllm.shared import affected, blocks_of, record, remote_prefill, started

__all__ = ["BUG", "run"]

BUG = Bug(
    id="V02",
    engine="vllm",
    title="NixlPush decode: a request aborted while waiting for remote KV holds its blocks for ever",
    issue="https://github.com/vllm-project/vllm/issues/46283",
    fix="https://github.com/vllm-project/vllm/pull/46289",
    bug_class="stranded",
    affected="0.34.0",
    fixed="0.34.0+fix",
    trigger="abort in WAITING_FOR_REMOTE_KVS under NixlPushConnector; the dead prefill never reports",
)
HORIZON_S = 900.0  # engine time the run covers after the abort (the decode TTL is 480 s)
GRACE_STEPS = 50  # the control's grace before it reclaims (the fix: above the connector's lease)


def run(release: str) -> dict[str, Any]:
    connector = {
        "kv_connector": "NixlPushConnector",
        "kv_role": "kv_consumer",
        "kv_load_failure_policy": "fail",
    }
    e, timeline = started(40, max_running=8, max_tokens=256, connector=connector)
    if not affected(release):
        _reclaim_after_grace(e)
    for rid, base in (("A", 11), ("B", 400)):
        e.add(rid, [base + i for i in range(100)], 4, transfer=remote_prefill(rid, 7))
    e.step()
    e.abort(["B"])  # the client disconnects while B waits for its prefill's KV
    aborted = e.steps + 1  # EngineCore takes an abort in at the start of its next step
    held_at_abort = sorted(blocks_of(e.sched, "B"))
    e.step(received={"A"})  # A's KV lands; B's never will
    horizon = aborted + int(HORIZON_S / timeline.seconds_per_step)
    while e.steps < horizon:
        e.step()
    held = sorted(blocks_of(e.sched, "B"))
    if held:
        timeline.wrong(
            aborted,
            f"B aborted in WAITING_FOR_REMOTE_KVS keeps blocks {held_at_abort} with no report to come",
        )
    return record(
        timeline, release, held_at_end=held, has_unfinished=e.sched.has_unfinished_requests(),
        zombies=sorted(r for r, q in e.sched.requests.items() if q.is_finished()),
    )  # fmt: skip


def _reclaim_after_grace(e: Any) -> None:
    """The control (#46289's idea): a request aborted while waiting for remote KV is freed through
    the scheduler's own path once ``GRACE_STEPS`` pass with no report; a late report is ignored."""
    from vllm.v1.request import RequestStatus

    sched, aborted = e.sched, {}
    finish, update = sched.finish_requests, sched.update_from_output

    def finishing(ids: Any, status: Any) -> Any:
        waiting = {
            r for r in ([ids] if isinstance(ids, str) else list(ids or ()))
            if r in sched.requests and sched.requests[r].status == RequestStatus.WAITING_FOR_REMOTE_KVS
        }  # fmt: skip
        out = finish(ids, status)
        aborted.update(dict.fromkeys(waiting, e.steps))
        return out

    def updating(scheduled: Any, output: Any) -> Any:
        late = output.kv_connector_output
        if late is not None and late.finished_recving:
            late.finished_recving.difference_update(set(late.finished_recving) - set(sched.requests))
        out = update(scheduled, output)
        for rid, at in list(aborted.items()):
            if e.steps - at >= GRACE_STEPS and rid in sched.requests:
                getattr(sched, "_aborted_kv_loads", set()).discard(rid)
                sched._free_blocks(sched.requests[rid])
                del aborted[rid]
        return out

    sched.finish_requests, sched.update_from_output = finishing, updating

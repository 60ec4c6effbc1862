"""S20: a PD prefill request aborted (or its transfer failed) while an overlapped middle or final
chunk's result is pending: the result path is said to drop it without releasing it -- a chunk of
KV and the request's Mamba states owned by nobody (PR #36926, closed; the fix merged as PR #36988's
``_retire_aborted_prefill_result``, in 0.5.20).

The entry drives 0.5.19's own result path (``process_batch_result_disagg_prefill``) with its
``abort_request``, ``process_pending_chunked_abort``, ``process_prefill_chunk`` and inflight queue,
in the order of ``event_loop_overlap_disagg_prefill``, on a Mamba hybrid rank
(:mod:`rigs.sglang.pd_prefill`): an ``AbortReq`` while the final chunk's result is pending, one
while a middle chunk's is, and a decode side that fails while a middle chunk's is.  The wrong act
would be an aborted request that still holds KV or a Mamba slot after its last result while no
scheduler list owns it; SGLang's own idle check closes the run.

It does not happen on 0.5.19 (the row: *not reproduced*).  The overlap loop processes a result in
the turn after its launch and every path releases: a chunked request's abort is released at the top
of the next turn (``process_pending_chunked_abort``) and its late middle result dropped; an aborted
final result is cached and enqueued for its KV send, and released when the sender concludes; a
failed decode side is seen in the inflight queue after the last chunk.  0.5.20's retirement changes
only the final path: the request is released at its result instead of when its send concludes
(``aborted_final_held_turns``: 2 turns on 0.5.19, 0 on 0.5.20, with a decode side that reports its
abort two turns later).  The PR's other window -- an optimistic request that yields with its middle
result in flight, then is aborted -- does not open here: SGLang turns ``--optimistic-prefill-
attempts`` off for a model using its Mamba tree (and for ``pp_size > 1``), and where it is on, the
yield and the deferred release happen in one loop turn, with no ``AbortReq`` between them.
"""

from __future__ import annotations

from typing import Any

from rigs.bugs.entry import Bug, outcome

BUG = Bug(
    id="S20",
    engine="sglang",
    title="PD prefill: an abort while a chunk's result is pending drops the request unreleased",
    issue="https://github.com/sgl-project/sglang/pull/36926",
    fix="https://github.com/sgl-project/sglang/pull/36988",
    bug_class="leak",
    affected="0.5.19",
    fixed="0.5.20",
    trigger="AbortReq or a failed transfer while an overlapped middle or final chunk's result is pending",
)

CHUNK, PROMPT = 32, 80  # three chunks: two middle, one final


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle
    from rigs.sglang.driver import Driver
    from rigs.sglang.pd_prefill import PrefillLoop
    from rigs.timeline import Timeline

    timeline = Timeline()
    d = Driver(release, timeline=timeline)
    d.new("prefill", kv=512, mamba=16, rows=8, context=512, server={"disaggregation_mode": "prefill"})
    loop = PrefillLoop(d, CHUNK)
    held, seen = _final(loop)
    _middle(loop)
    _failed(loop)
    idle(d)  # SGLang's own idle check (raises, recorded, on a slot nobody owns)
    struck = timeline.wrong_act is not None
    extra = {"aborted_final_held_turns": held, "aborted_final_hold_seen": seen}
    return outcome(release, struck, {**timeline.row(), **extra})


def _turns(loop: Any, watched: Any, count: int = 1, aborts: tuple[str, ...] = ()) -> None:
    """``count`` loop turns (``aborts`` received at the first), ``watched`` checked after each."""
    for i in range(count):
        loop.turn(*(aborts if i == 0 else ()))
        _dropped(loop, watched)


def _drain(loop: Any, watched: Any) -> None:
    for _ in range(8):
        if not loop.busy():
            return
        _turns(loop, watched)


def _dropped(loop: Any, req: Any) -> None:
    """The wrong act: ``req`` aborted, its last result processed, still holding KV or a Mamba slot,
    and no scheduler list owning it."""
    from sglang.srt.disaggregation.utils import is_aborted

    s, record = loop.sched, loop.d.record(req)
    owners = [s.waiting_queue, s.disagg_prefill_inflight_queue, s.disagg_prefill_bootstrap_queue.queue]
    owners += [b.reqs for b, _ in s.result_queue]
    owned = req is s.chunked_req or any(req in reqs for reqs in owners)
    if is_aborted(req) and (record.holds_kv or record.holds_mamba) and not owned:
        held = f"{record.kv_allocated_len} KV slots and Mamba slot {record.mamba_pool_idx}"
        loop.d.timeline.wrong(loop.d.steps, f"{req.rid} is dropped holding {held}")


def _final(loop: Any) -> tuple[int, bool]:
    """AbortReq while the final chunk's result is pending; the decode side, aborted too, tells the
    sender two turns later.  Returns the turns the aborted request kept its KV after its result, and
    whether the probe showed it meanwhile as an aborted owner of a ``kv_send`` hold."""
    from sglang.srt.disaggregation.base import KVPoll

    r = loop.arrive("final", PROMPT)
    _turns(loop, r, 3)  # the two middle chunks and the final one launched
    _turns(loop, r, aborts=("final",))  # the final result comes back aborted
    held, seen = 0, False
    while loop.d.record(r).holds_kv and held < 8:
        held += 1
        r.disagg_kv_sender.state = KVPoll.Failed if held >= 2 else KVPoll.Transferring
        _turns(loop, r)
        seen = seen or _hold_seen(loop.d.probe.latest, r.rid)
    _drain(loop, r)
    return held, seen


def _hold_seen(snap: Any, rid: str) -> bool:
    from poolwatch.model.holds import HoldReason

    holds = snap.holds if snap is not None else ()
    named = [n for h in holds if h.reason is HoldReason.KV_SEND for n in h.named]
    return any(n.owner == rid and n.aborted for n in named)


def _middle(loop: Any) -> None:
    """AbortReq while a middle chunk's result is pending."""
    r = loop.arrive("middle", PROMPT)
    _turns(loop, r)  # its first chunk launched
    _turns(loop, r, 2, aborts=("middle",))
    _drain(loop, r)


def _failed(loop: Any) -> None:
    """The decode side fails while a middle chunk's result is pending (its sender reports it)."""
    from sglang.srt.disaggregation.base import KVPoll

    r = loop.arrive("failing", PROMPT)
    _turns(loop, r)
    r.disagg_kv_sender.state = KVPoll.Failed
    _turns(loop, r, 2)
    _drain(loop, r)

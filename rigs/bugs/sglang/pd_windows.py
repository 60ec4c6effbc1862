"""The windows S20's entry drives on a PD prefill rank (run in the release's venv): each is a request
aborted, or failed by its decode side, while one of its chunk results is pending, in one loop of
SGLang's (:mod:`rigs.sglang.pd_prefill`'s overlap loop, :mod:`rigs.sglang.pd_pipeline`'s pipeline
loop), and after every turn the check of the wrong act (:func:`dropped`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["attempts", "optimistic", "overlap", "pipeline"]


def attempts() -> int:
    """How many optimistic prefill attempts the release's resolved flags allow this rank."""
    from sglang.srt.runtime_context import get_disagg

    return int(get_disagg().optimistic_prefill_attempts)


def turns(loop: Any, watched: Any, count: int = 1, aborts: tuple[str, ...] = ()) -> None:
    """``count`` loop turns (``aborts`` received at the first), ``watched`` checked after each."""
    for i in range(count):
        loop.turn(*(aborts if i == 0 else ()))
        dropped(loop, watched)


def drain(loop: Any, watched: Any) -> None:
    for _ in range(12):
        if not loop.busy():
            return
        turns(loop, watched)


def dropped(loop: Any, req: Any) -> None:
    """The wrong act: ``req`` aborted, its last result processed, still holding KV or a Mamba slot,
    and no scheduler list owning it."""
    from sglang.srt.disaggregation.utils import is_aborted

    s, record = loop.sched, loop.d.record(req)
    owners = [s.waiting_queue, s.disagg_prefill_inflight_queue, s.disagg_prefill_bootstrap_queue.queue]
    owned = req is s.chunked_req or req in loop.pending() or any(req in reqs for reqs in owners)
    if is_aborted(req) and (record.holds_kv or record.holds_mamba) and not owned:
        held = f"{record.kv_allocated_len} KV slots and Mamba slot {record.mamba_pool_idx}"
        loop.d.timeline.wrong(loop.d.steps, f"{req.rid} is dropped holding {held}")


def overlap(loop: Any, prompt: int) -> dict[str, Any]:
    """The overlap loop on the Mamba tree: :func:`final`, :func:`middle`, :func:`failed`."""
    held_turns, seen = final(loop, prompt)
    middle(loop, prompt)
    failed(loop, prompt)
    return {"aborted_final_held_turns": held_turns, "aborted_final_hold_seen": seen}


def final(loop: Any, prompt: int) -> tuple[int, bool]:
    """AbortReq while the final chunk's result is pending; the decode side, aborted too, tells the
    sender two turns later.  Returns the turns the aborted request kept its KV after its result, and
    whether the probe showed it meanwhile as an aborted owner of a ``kv_send`` hold."""
    r = loop.arrive("final", prompt)
    turns(loop, r, 3)  # the two middle chunks and the final one launched
    turns(loop, r, aborts=("final",))  # the final result comes back aborted
    found = held(loop, r, concluded_after=2)
    drain(loop, r)
    return found


def _hold_seen(snap: Any, rid: str) -> bool:
    from poolwatch.model.holds import HoldReason

    holds = snap.holds if snap is not None else ()
    named = [n for h in holds if h.reason is HoldReason.KV_SEND for n in h.named]
    return any(n.owner == rid and n.aborted for n in named)


def middle(loop: Any, prompt: int) -> None:
    """AbortReq while a middle chunk's result is pending."""
    r = loop.arrive("middle", prompt)
    turns(loop, r)  # its first chunk launched
    turns(loop, r, 2, aborts=("middle",))
    drain(loop, r)


def failed(loop: Any, prompt: int) -> None:
    """The decode side fails while a middle chunk's result is pending (its sender reports it)."""
    from sglang.srt.disaggregation.base import KVPoll

    r = loop.arrive("failing", prompt)
    turns(loop, r)
    r.disagg_kv_sender.state = KVPoll.Failed
    turns(loop, r, 2)
    drain(loop, r)


def held(loop: Any, r: Any, *, concluded_after: int) -> tuple[int, bool]:
    """The turns ``r``, its last result processed, keeps its KV while its decode side (aborted too)
    has its sender report ``Failed`` from the ``concluded_after``-th turn on; and whether the probe
    showed it meanwhile as an aborted owner of a ``kv_send`` hold."""
    from sglang.srt.disaggregation.base import KVPoll

    turns_held, seen = 0, False
    while loop.d.record(r).holds_kv and turns_held < 8:
        turns_held += 1
        if turns_held >= concluded_after:
            r.disagg_kv_sender.state = KVPoll.Failed
        turns(loop, r)
        seen = seen or _hold_seen(loop.d.probe.latest, r.rid)
    return turns_held, seen


def optimistic(loop: Any, prompt: int) -> dict[str, Any]:
    """Optimistic prefill (``--disable-radix-cache``: the flags leave it on for a Mamba hybrid):
    the decode side fails while a middle chunk is pending (the chunk step's bootstrap check sees it);
    the request yields to a bootstrapped one while its middle chunk is pending, then is aborted; it
    is aborted with its final result pending while its decode side still bootstraps, which then
    fails it (its bootstrap timeout) three turns on; it is aborted with a middle chunk pending."""
    from sglang.srt.disaggregation.base import KVPoll

    r = loop.arrive("opt-failed", prompt, optimistic=True)
    turns(loop, r)  # its first chunk launched
    r.disagg_kv_sender.state = KVPoll.Failed
    turns(loop, r, 2)
    drain(loop, r)

    r = loop.arrive("opt-yield", prompt, optimistic=True)
    turns(loop, r)
    ready = loop.arrive("opt-ready", prompt // 4)
    ready.disagg_kv_sender.state = KVPoll.Success  # its transfer concludes once it is sent
    turns(loop, r)  # the yield, and the pending middle result's release and requeue
    requeued = r in loop.sched.waiting_queue and not loop.d.record(r).holds_kv
    turns(loop, r, aborts=("opt-yield",))
    drain(loop, r)

    r = loop.arrive("opt-final", prompt, optimistic=True)
    turns(loop, r, 3)
    turns(loop, r, aborts=("opt-final",))
    final_held, final_seen = held(loop, r, concluded_after=3)
    drain(loop, r)

    r = loop.arrive("opt-middle", prompt, optimistic=True)
    turns(loop, r)
    turns(loop, r, 2, aborts=("opt-middle",))
    drain(loop, r)
    return {
        "optimistic_yield_requeued": requeued,
        "optimistic_final_held_turns": final_held,
        "optimistic_final_hold_seen": final_seen,
    }


def pipeline(loop: Any, prompt: int) -> dict[str, Any]:
    """The pipeline-parallel loop: an ``AbortReq`` while a middle chunk is pending (the loop never
    runs the deferred chunked abort: the request is prefilled to its end, then waits for its
    sender, which the aborted decode side fails two turns on); a decode side that fails while a
    middle chunk is pending; an ``AbortReq`` while the final chunk is pending."""
    from sglang.srt.disaggregation.base import KVPoll

    r = loop.arrive("pp-middle", prompt)
    turns(loop, r)
    sent = len(loop.sched.sent)
    turns(loop, r, aborts=("pp-middle",))
    while loop.sched.chunked_req is r or r in loop.pending():
        turns(loop, r)
    launched_after_abort = sum(1 for rid, _ in loop.sched.sent[sent:] if rid == r.rid)
    middle_held, middle_seen = held(loop, r, concluded_after=2)
    drain(loop, r)

    r = loop.arrive("pp-failed", prompt)
    turns(loop, r)
    r.disagg_kv_sender.state = KVPoll.Failed
    turns(loop, r, 2)
    drain(loop, r)

    r = loop.arrive("pp-final", prompt)
    turns(loop, r, 3)
    turns(loop, r, aborts=("pp-final",))
    while r in loop.pending():
        turns(loop, r)
    final_held, final_seen = held(loop, r, concluded_after=2)
    drain(loop, r)
    return {
        "pipeline_sends_after_abort": launched_after_abort,
        "pipeline_middle_held_turns": middle_held,
        "pipeline_middle_hold_seen": middle_seen,
        "pipeline_final_held_turns": final_held,
        "pipeline_final_hold_seen": final_seen,
    }

"""S20: a PD prefill request aborted (or its transfer failed) while an overlapped middle or final
chunk's result is pending: the result path is said to drop it without releasing it -- a chunk of
KV and the request's Mamba states owned by nobody (PR #36926, closed; the fix merged as PR #36988's
``_retire_aborted_prefill_result``, in 0.5.20).

What the PRs say.  #36926 describes an aborted request losing its owner when an overlapped result
lands after an ``AbortReq`` or a bootstrap failure: the middle path drops aborted results, the final
path caches and enqueues without looking.  Its production deficit (one 16,384-token chunk and three
Mamba states) is one chunked request under the Mamba extra-buffer strategy (its state and two
ping-pong slots), and every one of its CPU tests builds an *optimistic* request (bootstrap still
pending) with the abort already set.  #36988, the fix that shipped, is scoped to a VLM encoder or
embedding-validation failure aborting a request after its allocations; it retires an aborted request
at its last result and never requeues an aborted optimistic one.

What the entry drives: 0.5.19's own result path (``process_batch_result_disagg_prefill``) with its
``abort_request``, ``process_pending_chunked_abort``, ``process_prefill_chunk``, bootstrap and
inflight-queue handling, on a Mamba hybrid rank, in three loops (:mod:`.pd_windows`, each turn
checked for the wrong act: an aborted request whose last result was processed, still holding KV or
a Mamba slot, owned by no scheduler list or pending batch; SGLang's own idle check closes each):

* ``event_loop_overlap_disagg_prefill`` on the Mamba tree with the extra buffer (a request holds its
  state and two ping-pong slots, the three states of the PR's report; the flags resolve optimistic
  prefill to 0 attempts): ``AbortReq`` with the final result pending, with a middle one pending, and a decode
  side failing with a middle one pending;
* the same loop with ``--disable-radix-cache`` (SGLang's ``ChunkCache``), where the flags leave
  optimistic prefill on (2 attempts): the decode side failing with a middle result pending, a yield
  to a bootstrapped request with a middle result pending and then an ``AbortReq``, an ``AbortReq``
  with the final result pending while the decode side still bootstraps (its bootstrap timeout fails
  it three turns on), an ``AbortReq`` with a middle result pending;
* ``event_loop_pp_disagg_prefill`` (``--pp-size 2``; the flags turn overlap and optimistic prefill
  off): ``AbortReq`` with a middle result pending, a failing decode side, ``AbortReq`` with the final
  result pending.

It does not happen on 0.5.19 (the row: *not reproduced*; the control 0.5.20 is silent too).  A
dropped middle result strands the request only if it has stopped chunking and nobody released it,
and on 0.5.19 every way a chunked request stops early releases it first: the deferred chunked abort
at the top of the next overlap turn, the chunk step's bootstrap check (``handle_bootstrap_failure``),
the yield's deferred release in the same turn as its pending result (no ``AbortReq`` can land
between them, so the PR's requeue of an aborted optimistic request never runs).  The pipeline loop
never runs the deferred chunked abort at all: the aborted request is prefilled to its end, its
middle chunks' KV still sent (and on 0.5.19 its final chunk's: 3 sends after the abort, 2 on
0.5.20), so it is still chunking at every middle result.  A
final result is always put on the inflight queue, which releases the request when its sender
concludes -- the aborted decode side failing it, or its bootstrap timeout -- so 0.5.19 holds an
aborted request 2 to 3 turns past its result where 0.5.20 releases it at once
(``*_held_turns``), the probe showing the hold meanwhile as an aborted owner of a ``kv_send`` hold.
The PR's CPU tests set their state up directly (a request already aborted when its result arrives)
instead of reaching it through a loop; its production deficit was on a Mamba extra-buffer tree,
where 0.5.19's flags turn optimistic prefill off; the abort source #36988 names (a VLM encoder
failure after the allocations) has no site in 0.5.19's or 0.5.20's PD prefill, whose only encoder
abort drops requests still waiting for their embeddings.  (No model runs: the extra buffer's
pools and tree are SGLang's own; its flags would refuse the strategy on a CPU, so the published
flags keep ``no_buffer``.)
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
PREFILL: dict[str, Any] = {"disaggregation_mode": "prefill"}
# each loop's rank: its server options (the flags SGLang resolves from them: optimistic prefill
# stays on only with --disable-radix-cache; --pp-size 2 turns it and the overlap scheduler off)
LOOPS: dict[str, dict[str, Any]] = {
    "overlap": PREFILL,
    "optimistic": {
        **PREFILL,
        "disable_radix_cache": True,
        "optimistic_prefill_attempts": 2,
        "disable_overlap_schedule": False,
    },
    "pipeline": {**PREFILL, "pp_size": 2, "optimistic_prefill_attempts": 2},
}


def run(release: str) -> dict[str, Any]:
    from rigs.bugs.sglang.flows import idle
    from rigs.sglang.driver import Driver
    from rigs.timeline import Timeline

    timelines: list[Timeline] = []
    extra: dict[str, Any] = {}
    for name, server in LOOPS.items():
        timeline = Timeline()
        d = Driver(release, timeline=timeline)
        # the overlap loop's Mamba tree with the extra buffer (what the overlap scheduler selects)
        d.new("prefill", kv=512, mamba=16, rows=8, context=512, extra_buffer=name == "overlap", server=server)
        extra |= _drive(name, d)
        idle(d)  # SGLang's own idle check (raises, recorded, on a slot nobody owns)
        timelines.append(timeline)
        row = timeline.row()
        extra[f"{name}_signals"] = [row[k] for k in ("wrong_act", "finding", "page", "engine")]
    struck = [t for t in timelines if t.wrong_act is not None]
    return outcome(release, bool(struck), {**(struck or timelines)[0].row(), **extra})


def _drive(name: str, d: Any) -> dict[str, Any]:
    """The windows of loop ``name`` on ``d``'s rank, and the optimistic attempts its flags allow."""
    from rigs.bugs.sglang import pd_windows as w
    from rigs.sglang.pd_pipeline import PipelineLoop
    from rigs.sglang.pd_prefill import PrefillLoop

    found = {f"{name}_optimistic_attempts": w.attempts()}
    if name == "pipeline":
        return found | w.pipeline(PipelineLoop(d, CHUNK), PROMPT)
    if name == "optimistic":
        return found | w.optimistic(PrefillLoop(d, CHUNK, radix=False), PROMPT)
    return found | w.overlap(PrefillLoop(d, CHUNK), PROMPT)

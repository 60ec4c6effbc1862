"""A PD prefill rank's pipeline-parallel loop around SGLang's own result path (run in the release's
venv).

``--pp-size > 1`` runs the prefill rank in ``event_loop_pp_disagg_prefill``, not the overlap loop:
the server turns the overlap scheduler off, and a loop turn is one micro-batch slot.  The release's
own methods run, in that loop's order, on the first pipeline stage: a slot receives (aborts reach
``abort_request``, which finds in-flight requests in the micro-batches, ``mbs``), ends the previous
chunk (``process_prefill_chunk``, which sends a middle chunk's KV there, the overlap scheduler
being off), launches its batch, then processes the batch of the *next* slot -- launched one turn
earlier -- (``process_batch_result_disagg_prefill``) and polls the inflight queue for the requests
whose transfer reached a terminal state (the stages' release consensus, one stage here).  What the
loop never calls is ``process_pending_chunked_abort``: that happens in
``get_next_disagg_prefill_batch_to_run``, which this loop does not use.  Stood in for, as in
:mod:`rigs.sglang.pd_prefill`: the forward, the stage-to-stage messages, the KV sender.
"""

from __future__ import annotations

from typing import Any

from rigs.sglang.driver import Driver
from rigs.sglang.pd_prefill import PrefillLoop
from rigs.sglang.pd_standins import launched

__all__ = ["PipelineLoop"]


class PipelineLoop(PrefillLoop):
    """``d``'s PD prefill rank turning as ``event_loop_pp_disagg_prefill`` turns on its first stage
    (``pp_size`` micro-batch slots; :meth:`turn` is one slot)."""

    pp_size = 2

    def __init__(self, d: Driver, chunk: int) -> None:
        super().__init__(d, chunk)
        s, n = self.sched, self.pp_size
        s.enable_overlap = False
        s.mbs, s.last_mbs, s.running_mbs = [None] * n, [None] * n, [s.running_batch] * n
        self.results: list[Any] = [None] * n
        self.slot = 0

    def turn(self, *aborts: str) -> None:
        """One micro-batch slot of the loop (``aborts``: the rids an ``AbortReq`` names)."""
        from sglang.srt.disaggregation.base import KVPoll
        from sglang.srt.managers.io_struct import AbortReq

        s, mb = self.sched, self.slot
        nxt = (mb + 1) % self.pp_size
        s.running_batch, s.last_batch = s.running_mbs[mb], s.last_mbs[mb]
        self.d.loop()  # the probe looks at the loop's receive, as in the overlap loop
        for rid in aborts:
            s.abort_request(AbortReq(rid=rid))
        s.process_prefill_chunk(last_batch=s.last_batch, running_batch=s.running_batch)
        batch = self._next_batch()
        s.mbs[mb], s.running_mbs[mb] = batch, s.running_batch
        self.results[mb] = launched(batch) if batch is not None else None
        if s.mbs[nxt] is not None:  # the next slot's batch, launched a turn earlier
            done, result = self.results[nxt]
            self.results[nxt] = None
            s.process_batch_result_disagg_prefill(done, result)
            s.last_mbs[nxt] = s.mbs[nxt]
        terminal = (KVPoll.Success, KVPoll.Failed)
        released = [r.rid for r in s.disagg_prefill_inflight_queue if r.disagg_kv_sender.poll() in terminal]
        s.process_disagg_prefill_inflight_queue(released)
        s.running_batch.batch_is_full = False
        self.slot = nxt

    def pending(self) -> list[Any]:
        return [r for launched in self.results if launched is not None for r in launched[0].reqs]

    def busy(self) -> bool:
        s = self.sched
        return bool(any(s.mbs) or s.chunked_req or s.disagg_prefill_inflight_queue)

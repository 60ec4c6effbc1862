"""Aborts (client gone, timeout, router decision) wherever the request is: waiting requests are
dropped at once (a copy-on-write Mamba slot is freed, unless ``mamba-cow-leak-on-abort``
strikes), PD decode requests holding preallocated KV are released at once, running ones are
marked ``to_finish`` and released with their next result, as in SGLang."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolwatch_emulator.ownership import free_req_mamba
from poolwatch_emulator.req import Req

__all__ = ["Abort", "SchedulerAbortMixin"]


@dataclass(frozen=True, slots=True)
class Abort:
    """An abort of request ``rid`` (client gone, timeout, router decision)."""

    rid: str


class SchedulerAbortMixin:
    def abort_request(self: Any, abort: Abort) -> None:
        """Abort ``rid`` wherever it is; holders of KV are released at once or at their next
        result, as in SGLang."""
        rid = abort.rid
        for req in self.waiting_queue:
            if req.rid == rid:
                self.waiting_queue.remove(req)
                self._abort_waiting(req)
                return
        for queue in (
            self.disagg_prefill_bootstrap_queue.queue,
            self.disagg_decode_prealloc_queue.retracted_queue,
        ):
            queue[:] = [r for r in queue if r.rid != rid]
        prealloc = self.disagg_decode_prealloc_queue
        prealloc.queue = [d for d in prealloc.queue if d.req.rid != rid]
        for holder in self._live_holders():
            if holder.rid == rid and not holder.finished():
                holder.to_finish = "abort"
                if holder.transfer is not None:
                    holder.transfer.failed = True

    def _live_holders(self: Any) -> list[Req]:
        reqs = list(self.running_batch.reqs) + list(self.disagg_prefill_inflight_queue)
        reqs += [d.req for d in self.disagg_decode_transfer_queue.queue]
        if self.last_batch is not None:
            reqs += self.last_batch.reqs
        if self.chunked_req is not None:
            reqs.append(self.chunked_req)
        return reqs

    def _abort_waiting(self: Any, req: Req) -> None:
        req.finished_reason = "abort"
        self.emu_encoder_release(req)
        if req.transfer is not None:
            req.transfer.failed = True
        if self.is_decode_mode:  # transferred, not yet running: holds all of its KV
            self.emu_decode_abort_release(req)
        elif req.mamba_pool_idx is not None and not self.faults.fires("mamba-cow-leak-on-abort"):
            free_req_mamba(self.req_to_token_pool, req)

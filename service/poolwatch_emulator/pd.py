"""Prefill-decode disaggregation: the queues of both sides and the KV transfer between them
(``disaggregation/prefill.py``, ``decode.py``, reference §3.2).

Prefill: ``disagg_prefill_bootstrap_queue`` (waits for the decode side to preallocate) ->
``waiting_queue`` -> (chunked) prefill -> ``disagg_prefill_inflight_queue`` (prefix inserted and
locked, the request keeps its row and Mamba slot until the transfer ends) -> released.
Decode: ``disagg_decode_prealloc_queue.queue`` -> ``_pre_alloc`` (row, all KV, Mamba slot) ->
``disagg_decode_transfer_queue.queue`` -> ``waiting_queue`` -> running batch; retracted requests
wait in ``disagg_decode_prealloc_queue.retracted_queue`` holding nothing on the device.
"""

from __future__ import annotations

from typing import Any

from poolwatch_emulator.ownership import free_row, hybrid
from poolwatch_emulator.req import ForwardMode, Req, ScheduleBatch
from poolwatch_emulator.transfer import DecodeRequest

__all__ = ["SchedulerDisaggDecodeMixin", "SchedulerDisaggPrefillMixin"]


class SchedulerDisaggPrefillMixin:
    def get_next_disagg_prefill_batch_to_run(self: Any) -> ScheduleBatch | None:
        self.process_prefill_chunk()
        batch: ScheduleBatch | None = self.get_new_batch_prefill()
        return batch

    def process_prefill_chunk(self: Any) -> None:
        last = self.last_batch
        if last is None or not last.forward_mode.is_extend() or self.chunked_req is None:
            return
        if not self.emu_chunk_pending:
            return
        self.emu_chunk_pending = False
        last.filter_batch(chunked_req_to_exclude=self.chunked_req)
        hybrid_pool = hybrid(self.req_to_token_pool) is not None
        self.emu_chunk_boundary(fault="pd-chunked-mamba-double-free" if hybrid_pool else None)

    def process_batch_result_disagg_prefill(self: Any, batch: ScheduleBatch, result: list[int]) -> None:
        for req in self.emu_prefilled(batch, result):
            self.tree_cache.cache_unfinished_req(req)
            self.disagg_prefill_inflight_queue.append(req)
            req.transfer.prefill_done_at = self.clock.now
            if self.faults.fires("pd-prefill-stranded-kv"):
                req.transfer.decode_lost = True  # the decode side drops it; nobody tells this sender

    def process_disagg_prefill_inflight_queue(self: Any) -> None:
        undone: list[Req] = []
        for req in self.disagg_prefill_inflight_queue:
            if req.to_finish is not None or req.transfer.failed_for("prefill"):
                req.transfer.failed = req.transfer.failed or req.to_finish is not None
                self.emu_abort_release(req)
            elif req.transfer.done(self.clock.now):
                req.finished_reason = "length"
                self.emu_release(req)
                self.emu_finished_total += 1
            else:
                undone.append(req)
        self.disagg_prefill_inflight_queue = undone


class SchedulerDisaggDecodeMixin:
    def process_decode_queue(self: Any) -> None:
        offload = self.decode_offload_manager
        late = offload is not None and self.faults.fires("decode-offload-acks-behind-retract")
        if offload is not None and not late:  # first, since PR #11656 (0.5.5+)
            offload.check_offload_progress()
        self.waiting_queue.extend(self.emu_resume_retracted())
        if self.disagg_decode_prealloc_queue.retracted_queue:
            return  # 0.5.4.post1 checked the offloads only past here: never while requests are retracted
        self.disagg_decode_transfer_queue.queue.extend(self.emu_pop_preallocated())
        self.waiting_queue.extend(self.emu_pop_transferred())
        if late:
            offload.check_offload_progress()

    def emu_room_for(self: Any, tokens: int) -> bool:
        need = -(-tokens // self.page_size) * self.page_size
        rows = len(self.req_to_token_pool.free_slots) > 0
        return (
            rows and self.emu_mamba_room(1) and self.emu_full_available() - self.emu_decode_reserve() >= need
        )

    def emu_pre_alloc(self: Any, req: Req, tokens: int) -> None:
        """Row, Mamba slot and KV for ``tokens`` tokens (all of them: no tree on decode)."""
        self.emu_alloc_row(req)
        locs = self.token_to_kv_pool_allocator.alloc_extend_one(0, 0, tokens)
        assert locs is not None  # emu_room_for checked
        assert req.req_pool_idx is not None
        self.req_to_token_pool.write(req.req_pool_idx, 0, locs)
        req.kv_allocated_len = req.kv_committed_len = tokens
        req.fill_ids = (req.origin_input_ids + req.output_ids)[:tokens]  # the KV that exists

    def emu_resume_retracted(self: Any) -> list[Req]:
        resumed: list[Req] = []
        queue = self.disagg_decode_prealloc_queue.retracted_queue
        while queue and self.emu_room_for(queue[0].seqlen + self.settings.decode_reserve_per_req):
            req = queue.pop(0)
            self.emu_pre_alloc(req, req.seqlen - 1)
            req.is_retracted = False
            resumed.append(req)
        return resumed

    def emu_pop_preallocated(self: Any) -> list[DecodeRequest]:
        moved: list[DecodeRequest] = []
        queue = self.disagg_decode_prealloc_queue.queue
        while queue:
            dreq = queue[0]
            if dreq.req.transfer.failed_for("decode"):
                queue.pop(0)
                continue
            tokens = len(dreq.req.origin_input_ids)
            if not self.emu_room_for(tokens):
                break
            queue.pop(0)
            self.emu_pre_alloc(dreq.req, tokens)
            dreq.req.transfer.decode_ready = True
            dreq.waiting_for_input = True
            dreq.emu_waiting_since = self.clock.now
            if self.faults.fires("pd-decode-stranded-kv"):
                dreq.req.transfer.prefill_lost = True  # the prefill side drops it; this receiver waits
            moved.append(dreq)
        return moved

    def emu_pop_transferred(self: Any) -> list[Req]:
        arrived: list[Req] = []
        undone: list[DecodeRequest] = []
        for dreq in self.disagg_decode_transfer_queue.queue:
            req = dreq.req
            timed_out = (
                self.clock.now - dreq.emu_waiting_since >= self.settings.disaggregation_waiting_timeout
            )
            if req.to_finish is not None:
                self.emu_decode_abort_release(req)
            elif req.transfer.failed_for("decode") or timed_out:
                if timed_out and not req.transfer.failed_for("decode"):
                    self.logger.error(
                        f"Decode transfer failed for request rank={self.tp_rank} req.rid='{req.rid}'"
                        " with exception KVTransferError: timed out in KVPoll.WaitingForInput"
                    )
                req.finished_reason = "abort"
                self.tree_cache.cache_finished_req(req)
            elif req.transfer.done(self.clock.now):
                req.output_ids.append(self.emu_first_token(req))
                arrived.append(req)
            else:
                undone.append(dreq)
        self.disagg_decode_transfer_queue.queue = undone
        return arrived

    def emu_first_token(self: Any, req: Req) -> int:
        return len(req.origin_input_ids) % 50_000 + 1

    def emu_decode_abort_release(self: Any, req: Req) -> None:
        """Release an aborted decode request that holds preallocated KV."""
        req.finished_reason = "abort"
        leak = self.faults.fires("pd-decode-abort-kv-leak")
        if leak:
            free_row(self.req_to_token_pool, req, free_mamba=True)
            req.kv_committed_freed = req.kv_overallocated_freed = True
        else:
            self.tree_cache.cache_finished_req(req)

    def get_next_disagg_decode_batch_to_run(self: Any) -> ScheduleBatch | None:
        self.emu_merge_last_extend()
        batch: ScheduleBatch | None = self.emu_new_or_running(self.get_new_prebuilt_batch())
        return batch

    def get_new_prebuilt_batch(self: Any) -> ScheduleBatch | None:
        if not self.waiting_queue:
            return None
        room = self.server_args.max_running_requests - self.running_batch.batch_size()
        if room <= 0:
            return None
        can_run, self.waiting_queue = self.waiting_queue[:room], self.waiting_queue[room:]
        for req in can_run:  # process_prebuilt: the transferred KV becomes the request's prefix
            self.tree_cache.cache_unfinished_req(req)
        return ScheduleBatch(can_run, ForwardMode.EXTEND)

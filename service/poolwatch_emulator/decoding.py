"""Decode steps: one new KV slot (or page) per running request, and retraction when the pool runs
dry (``update_running_batch`` / ``retract_decode``).  Shared by unified and PD decode ranks."""

from __future__ import annotations

from typing import Any

from poolwatch_emulator.ownership import free_row
from poolwatch_emulator.req import ForwardMode, Req, ScheduleBatch
from poolwatch_emulator.spec import free_overallocated

__all__ = ["SchedulerDecodeMixin"]


class SchedulerDecodeMixin:
    def update_running_batch(self: Any, batch: ScheduleBatch) -> ScheduleBatch:
        batch.filter_batch()
        if batch.is_empty():
            return batch
        flush = self.enable_hierarchical_cache and not self.faults.fires("hicache-write-acks-undrained")
        if flush:  # 0.5.10+ (S14's fix, PR #20049); 0.5.4 - 0.5.9 drain only in the prefill builder
            self.tree_cache.flush_write_through_acks()
        while batch.reqs and self.emu_decode_shortfall(batch) > 0:
            self.tree_cache.evict(self.emu_decode_shortfall(batch))
            if self.emu_decode_shortfall(batch) > 0:
                self.emu_retract_one(batch)
        if batch.reqs:
            self.prepare_for_decode(batch)
        return batch

    def emu_decode_shortfall(self: Any, batch: ScheduleBatch) -> int:
        ps: int = self.page_size
        spec = self.settings.speculative
        if spec is not None:  # new_tokens_required_next_decode, spec v2: the whole reserve
            need: int = spec.tokens_required_next_decode(ps) * len(batch.reqs)
        else:
            need = sum(1 for r in batch.reqs if r.kv_allocated_len % ps == 0) * ps
        return need - int(self.emu_full_available())

    def prepare_for_decode(self: Any, batch: ScheduleBatch) -> None:
        import torch

        batch.forward_mode = ForwardMode.DECODE
        if self.settings.speculative is not None:
            self.emu_spec_prepare_for_decode(batch)
            return
        reqs = batch.reqs
        rows = torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64)
        cols = torch.tensor([r.kv_allocated_len for r in reqs], dtype=torch.int64)
        table = self.req_to_token_pool.req_to_token
        last_locs = table[rows, cols - 1].to(torch.int64)
        locs = self.token_to_kv_pool_allocator.alloc_decode([r.kv_allocated_len for r in reqs], last_locs)
        if locs is None:
            raise RuntimeError("Decode out of memory. Try to lower your batch size.")
        table[rows, cols] = locs.to(table.dtype)
        for r in reqs:
            r.kv_allocated_len += 1
            r.kv_committed_len = r.kv_allocated_len

    def emu_retract_one(self: Any, batch: ScheduleBatch) -> None:
        """Retract the request with the fewest outputs (and the longest prompt among those)."""
        victim = min(batch.reqs, key=lambda r: (len(r.output_ids), -len(r.origin_input_ids)))
        batch.reqs.remove(victim)
        self.emu_encoder_release(victim)
        self.emu_release_retracted(victim)
        self.num_retracted_reqs += 1
        victim.reset_for_retract()
        victim.mamba_pool_idx = None
        if self.is_decode_mode:
            self.disagg_decode_prealloc_queue.retracted_queue.append(victim)
        else:
            self.waiting_queue.insert(0, victim)

    def emu_release_retracted(self: Any, req: Req) -> None:
        """Free the request's private KV (decode: all of it; a draft reserve past the committed
        KV too), its lock, row and Mamba slot."""
        start = 0 if self.is_decode_mode else req.cache_protected_len
        end = req.kv_committed_len
        if end > start and self.faults.fires("full-kv-leak-on-retract"):
            last_page = (end - 1) // self.page_size * self.page_size
            end = max(start, last_page)
        self.token_to_kv_pool_allocator.free(self.emu_row_slice(req, start, end))
        free_overallocated(self.tree_cache, req)
        self.tree_cache.dec_lock_ref(req.last_node)
        if self.is_decode_mode:
            self.tree_cache.emu_unprotect(req)
        free_row(self.req_to_token_pool, req, free_mamba=True)

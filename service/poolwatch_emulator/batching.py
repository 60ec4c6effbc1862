"""Forming and finishing batches on a non-PD or PD-prefill rank (``get_next_batch_to_run``, the
prefill adder, ``update_running_batch`` with retraction, ``process_batch_result``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.ownership import free_row, hybrid
from poolwatch_emulator.req import ForwardMode, Req, ScheduleBatch

if TYPE_CHECKING:
    import torch

__all__ = ["SchedulerBatchMixin"]


class SchedulerBatchMixin:
    """Mixed into :class:`~poolwatch_emulator.scheduler.Scheduler` (``self`` is the scheduler;
    typed ``Any`` because mypy cannot type a mixin's self as its subclass)."""

    chunked_req: Req | None

    def get_next_batch_to_run(self: Any) -> ScheduleBatch | None:
        if self.chunked_req is not None and self.emu_chunk_pending:
            self.emu_chunk_pending = False
            self.last_batch_filter_chunked()
            self.emu_chunk_boundary()
        self.emu_merge_last_extend(chunked_req_to_exclude=self.chunked_req)
        batch: ScheduleBatch | None = self.emu_new_or_running(self.get_new_batch_prefill())
        return batch

    def emu_merge_last_extend(self: Any, **exclude: Any) -> None:
        """The last step's extend batch, filtered (``exclude``: what ``filter_batch`` leaves out),
        joins the running batch."""
        last = self.last_batch
        if last is not None and last.forward_mode.is_extend():
            last.filter_batch(**exclude)
            if not last.is_empty():
                if self.running_batch.is_empty():
                    self.running_batch = last
                else:
                    self.running_batch.merge_batch(last)

    def emu_new_or_running(self: Any, new_batch: ScheduleBatch | None) -> ScheduleBatch | None:
        """``new_batch`` when there is one; else the running batch after its decode update (with
        retraction), ``None`` when nothing runs."""
        if new_batch is not None:
            return new_batch
        if self.running_batch.is_empty():
            return None
        self.running_batch = self.update_running_batch(self.running_batch)
        return None if self.running_batch.is_empty() else self.running_batch

    def last_batch_filter_chunked(self: Any) -> None:
        if self.last_batch is not None:
            self.last_batch.filter_batch(chunked_req_to_exclude=self.chunked_req)

    def emu_chunk_boundary(self: Any, *, fault: str | None = None) -> None:
        """Insert the finished chunk into the tree; before 0.5.9 also free the row -- and, when
        ``fault`` strikes there, its Mamba slot too.  The fault is only offered its chance where
        the row is really freed (not for a request aborted at the boundary), so a strike counted
        is a strike made."""
        req = self.chunked_req
        assert req is not None
        if req.to_finish is not None:
            self.chunked_req = None
            self.emu_abort_release(req)
            return
        self.tree_cache.cache_unfinished_req(req, chunked=True)
        if not self.release.keeps_row_across_chunks:
            free_mamba = fault is not None and self.faults.fires(fault)
            free_row(self.req_to_token_pool, req, free_mamba=free_mamba)
        self.running_batch.batch_is_full = False

    # -- the prefill adder -------------------------------------------------------------------

    def get_new_batch_prefill(self: Any) -> ScheduleBatch | None:
        if self.chunked_req is None and not self.waiting_queue:
            return None
        running_bs = len(self.running_batch.reqs)
        if running_bs >= self.server_args.max_running_requests:
            return None
        if self.enable_hierarchical_cache:
            self.tree_cache.check_hicache_events()
        self.emu_encoder_new_step()
        budget = self.server_args.chunked_prefill_size
        can_run: list[Req] = []
        new_chunked = self.chunked_req  # kept when its next chunk cannot run yet
        pending = hit = 0
        queue = [self.chunked_req] if self.chunked_req is not None else []
        queue += self.waiting_queue
        for req in queue:
            if running_bs + len(can_run) >= self.server_args.max_running_requests or budget <= 0:
                break
            continuing = req is self.chunked_req
            taken = self.emu_try_add(req, budget, pending, continuing, len(can_run))
            if taken is None:
                break
            can_run.append(req)
            if continuing:
                new_chunked = None
            budget -= taken
            pending += taken + self.page_size
            hit += 0 if continuing else len(req.prefix_indices)
            if len(req.fill_ids) < req.seqlen:
                new_chunked = req
                break
        self.chunked_req = new_chunked
        if not can_run:
            return None
        added = {id(r) for r in can_run}
        self.waiting_queue = [r for r in self.waiting_queue if id(r) not in added]
        self.log_prefill_stats(can_run, pending - len(can_run) * self.page_size, hit, running_bs)
        self.emu_prepare_for_extend(can_run)
        self.emu_chunk_pending = new_chunked is not None and any(r is new_chunked for r in can_run)
        return ScheduleBatch(can_run, ForwardMode.EXTEND)

    def emu_try_add(
        self: Any, req: Req, budget: int, pending: int, continuing: bool, added: int
    ) -> int | None:
        """Admit ``req`` (or its next chunk); the number of new tokens, or None if it must wait."""
        if continuing:
            req.fill_ids = req.origin_input_ids + req.output_ids
        else:
            if not self.emu_mamba_room(2 + added) or (
                not self.req_to_token_pool.free_slots and not req.emu_row_held
            ):
                return None
            self.init_next_round_input(req)
        prefix_len = len(req.prefix_indices)
        extend = len(req.fill_ids) - prefix_len
        trunc = min(extend, budget)
        if trunc < extend:
            trunc -= (prefix_len + trunc) % self.page_size
        scheduled: tuple[int, list[int]] = self.emu_schedule_encoder_inputs(req, prefix_len, trunc)
        trunc, encoder_inputs = scheduled
        if trunc < extend:
            trunc -= (prefix_len + trunc) % self.page_size
        if trunc <= 0:
            self.emu_not_admitted(req, continuing, encoder_inputs, locked=False)
            return None
        if not continuing:
            self.tree_cache.inc_lock_ref(req.last_node)
        room = self.emu_kv_room() - pending - self.emu_decode_reserve()
        if room < trunc + self.page_size:
            self.emu_not_admitted(req, continuing, encoder_inputs, locked=True)
            return None
        self.emu_encoder_admitted(req, encoder_inputs)
        req.fill_ids = req.fill_ids[: prefix_len + trunc]
        req.extend_input_len = trunc
        return trunc

    def emu_not_admitted(
        self: Any, req: Req, continuing: bool, encoder_inputs: list[int], *, locked: bool
    ) -> None:
        """A waiting request (or chunk) that must wait: its lock and encoder references go back."""
        if continuing:
            self.emu_encoder_scheduled -= sum(req.get_num_encoder_embeds(i) for i in encoder_inputs)
            return
        if locked:
            self.tree_cache.dec_lock_ref(req.last_node)
        self.emu_encoder_not_admitted(req, encoder_inputs)

    def init_next_round_input(self: Any, req: Req) -> None:
        """Match the prefix (copy-on-write of the Mamba state, possibly while still waiting)."""
        req.fill_ids = req.origin_input_ids + req.output_ids
        match = self.tree_cache.match_prefix(
            req.fill_ids[: len(req.fill_ids) - 1], cow_mamba=self.is_mamba_tree, req=req
        )
        req.prefix_indices = match.device_indices
        req.last_node = match.last_device_node
        req.set_protected(len(req.prefix_indices))

    def emu_kv_room(self: Any) -> int:
        evictable = self.tree_cache.tree.full_evictable_size_ if self.tree_cache.is_tree_cache() else 0
        return int(self.emu_full_available()) + evictable

    def emu_full_available(self: Any) -> int:
        alloc = self.token_to_kv_pool_allocator
        return int(
            alloc.full_available_size() if hasattr(alloc, "full_available_size") else alloc.available_size()
        )

    def emu_mamba_room(self: Any, need: int) -> bool:
        hp = hybrid(self.req_to_token_pool)
        if hp is None:
            return True
        evictable = self.tree_cache.mamba_evictable_size() if self.is_mamba_tree else 0
        return hp.mamba_pool.available_size() + evictable >= need

    def emu_decode_reserve(self: Any) -> int:
        return len(self.running_batch.reqs) * int(self.settings.decode_reserve_per_req)

    def emu_alloc_kv(self: Any, prefix_len: int, last_loc: int, n: int) -> torch.Tensor:
        alloc = self.token_to_kv_pool_allocator
        locs: torch.Tensor | None = alloc.alloc_extend_one(prefix_len, last_loc, n)
        if locs is None:
            self.tree_cache.evict(n + self.page_size)
            locs = alloc.alloc_extend_one(prefix_len, last_loc, n)
        if locs is None:
            raise RuntimeError(f"Prefill out of memory. Try to lower your batch size. need={n}")
        return locs

    def emu_alloc_row(self: Any, req: Req) -> None:
        hp = hybrid(self.req_to_token_pool)
        fresh = not req.emu_row_held
        if hp is not None:
            if req.mamba_pool_idx is None and hp.mamba_pool.available_size() == 0:
                self.tree_cache.evict_mamba(1)
            rows = hp.alloc_for([req])
            if rows is None:
                raise RuntimeError("alloc_req_slots runs out of memory")
        elif fresh:
            got = self.req_to_token_pool.alloc(1)
            if got is None:
                raise RuntimeError("alloc_req_slots runs out of memory")
            req.req_pool_idx = got[0]
        req.emu_row_held = True
        if fresh and len(req.prefix_indices):
            assert req.req_pool_idx is not None
            self.req_to_token_pool.write(req.req_pool_idx, 0, req.prefix_indices)

    def emu_prepare_for_extend(self: Any, reqs: list[Req]) -> None:
        for req in reqs:
            self.emu_alloc_row(req)
            prefix_len = len(req.prefix_indices)
            last_loc = int(req.prefix_indices[-1]) if prefix_len else 0
            locs = self.emu_alloc_kv(prefix_len, last_loc, req.extend_input_len)
            assert req.req_pool_idx is not None
            self.req_to_token_pool.write(req.req_pool_idx, prefix_len, locs)
            req.kv_allocated_len = req.kv_committed_len = len(req.fill_ids)
            req.is_chunked = 1 if len(req.fill_ids) < req.seqlen else 0

    def emu_row_slice(self: Any, req: Req, start: int, end: int) -> Any:
        import torch

        assert req.req_pool_idx is not None
        return self.req_to_token_pool.req_to_token[req.req_pool_idx, start:end].to(torch.int64)

"""The scheduler's steps in an SGLang release's own API (run in its venv): what differs between
releases is read from the release's row of :mod:`rigs.sglang.releases`.

A request arrives (``Req``), is matched against the tree and prefilled -- whole, or in chunks whose
boundary hands the chunk to the tree -- runs (decode), and is released when it finishes, is aborted
or is retracted; the tree is evicted when a step needs room.  Up to 0.5.6 a request takes its row
with ``alloc(n, reqs)`` and the chunked request's row goes back at each chunk boundary; from 0.5.9
``alloc(reqs)`` / ``free(req)``, the row kept; 0.5.23 keeps the request's row, Mamba slot and
``kv_*_len`` on ``req.kv``, locks the matched node, and hands chunks and finished requests to its
``UnifiedRadixCache`` through ``checkpoint_kv_cache`` and ``release_kv_cache``.
"""

from __future__ import annotations

import array
from typing import Any

from rigs.sglang.extend import Extend
from rigs.sglang.pieces import Batch
from rigs.sglang.releases import Release

__all__ = ["Steps"]


class Steps(Extend):
    """The scheduler's steps on ``sched`` (a rank of ``release``)."""

    release: Release
    sched: Any
    load_back: Any  # a new request's host hit loaded back after its match (HiCache: rigs.sglang.hicache)

    def arrive(self, rid: str, ids: list[int], max_new: int = 4, **fields: Any) -> Any:
        """A real ``Req`` (``fields``: more of its constructor's keywords, e.g. ``priority``)."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        req = Req(rid, "", ids, SamplingParams(max_new_tokens=max_new), **fields)
        if self.release.token_array:  # release_kv_cache appends output_ids' array to it
            req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
        return req

    def record(self, req: Any) -> Any:
        """The object holding the request's row, Mamba slot and ``kv_*_len`` (0.5.23: ``req.kv``)."""
        return req.kv if self.release.kv_lens == "req.kv" else req

    def allocated(self, req: Any) -> int:
        """How many KV slots the request's row holds."""
        if self.release.kv_lens == "req" and self.release.unified_tree:  # 0.5.17: in its ReqKvInfo
            return int(req.kv.kv_allocated_len) if req.kv is not None else 0
        if self.release.kv_lens:
            return int(self.record(req).kv_allocated_len)
        return len(req.origin_input_ids) + len(req.output_ids) - 1

    def _grown(self, req: Any, upto: int) -> None:
        """The request's KV now reaches ``upto``, recorded where the release keeps its lengths."""
        if self.release.kv_lens == "req" and self.release.unified_tree:
            req.kv.kv_allocated_len = req.kv_committed_len = upto
        elif self.release.kv_lens:
            held = self.record(req)
            held.kv_committed_len = held.kv_allocated_len = upto

    @property
    def mamba_free(self) -> Any:
        """The object whose ``free_slots`` is the Mamba free list (``mamba_pool`` or 0.5.23's
        ``mamba_allocator``)."""
        pool = self.sched.req_to_token_pool
        return pool.mamba_allocator if self.release.mamba_allocator else pool.mamba_pool

    def _room(self, tokens: int) -> None:
        """What the scheduler's allocation helpers do first: evict the tree until ``tokens`` KV slots
        and two Mamba slots (a request's and a copy-on-write one) are free."""
        short_kv = tokens - self.sched.token_to_kv_pool_allocator.available_size()
        short_mamba = 2 - self.mamba_free.available_size() if self.sched.cache_params is not None else 0
        if short_kv > 0 or short_mamba > 0:
            self.evict(tokens=max(short_kv, 0), mamba=max(short_mamba, 0))

    def prefill(self, reqs: list[Any], chunk: int | None = None) -> Batch:
        """init_next_round_input + the adder + prepare_for_extend (``chunk``: this many new tokens,
        the request becoming the chunked one while its prompt is not done), then the forward."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        one = self._prefill_one if not self.release.unified_tree else None
        one = one or (self._extend if self.release.tree_lock else self._extend_v1)
        for req in reqs:
            one(req, chunk)
        batch = Batch(reqs, ForwardMode.EXTEND)
        self.sched.last_batch = batch
        self.sched.forward_ct += 1  # run_batch counts each forward pass
        return batch

    def _prefill_one(self, req: Any, chunk: int | None) -> None:
        s, lens = self.sched, self.release.kv_lens
        self._room(len(req.origin_input_ids) + len(req.output_ids) + 8)  # (a retracted one reruns its output)
        if req is s.chunked_req:  # a continuing chunk keeps the prefix cache_unfinished_req set
            req.init_next_round_input()
        else:
            req.init_next_round_input(s.tree_cache)
            self.load_back(req)  # (HiCache: the prefix's host part back on the device)
            s.tree_cache.inc_lock_ref(req.last_node)
        pre, fill = len(req.prefix_indices), self._fill(req, chunk)
        if chunk is not None or req is s.chunked_req:  # (a retracted request refills its output too)
            s.chunked_req = req if fill < len(req.origin_input_ids) + len(req.output_ids) else None
        if self.release.legacy:  # (a plain model's rows: alloc(n), no Mamba slot to give the request)
            pool = s.req_to_token_pool
            req.req_pool_idx = (pool.alloc(1) if s.cache_params is None else pool.alloc(1, [req]))[0]
            row = int(req.req_pool_idx)
        else:
            req.extend_input_len = fill - pre
            row = int(s.req_to_token_pool.alloc([req])[0])
        s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
        s.req_to_token_pool.write((row, slice(pre, fill)), s.token_to_kv_pool_allocator.alloc(fill - pre))
        if lens:
            req.kv_committed_len = req.kv_allocated_len = fill
        if not self.release.legacy and s.chunked_req is req:
            setattr(req, self.release.chunk_count, getattr(req, self.release.chunk_count) + 1)

    def _fill(self, req: Any, chunk: int | None) -> int:
        """How far this round fills the request (``chunk``: that many tokens past its prefix), set
        where the release keeps it: ``fill_ids``, or 0.5.13's ``fill_len`` over its untruncated ids."""
        if self.release.fill_len:
            whole = len(req.full_untruncated_fill_ids)
            req.fill_len = whole if chunk is None else min(len(req.prefix_indices) + chunk, whole)
            return int(req.fill_len)
        if chunk is not None:
            req.fill_ids = req.fill_ids[: len(req.prefix_indices) + chunk]
        return len(req.fill_ids)

    def prefill_done(self, batch: Batch) -> None:
        """process_batch_result_prefill: one token for each finished prompt, which runs on."""
        s = self.sched
        for req in batch.reqs:
            count = self.release.chunk_count
            if not self.release.legacy and not self.release.unified_tree and getattr(req, count) > 0:
                setattr(req, count, getattr(req, count) - 1)
            if req is s.chunked_req:
                continue
            req.output_ids.append(7)
            if not self.release.tree_lock:  # (0.5.17 - 0.5.21 too: maybe_cache_unfinished_req)
                s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)
        if self.release.unified_tree:
            s.last_batch = s.running_batch

    def admit(self, req: Any) -> None:
        """The whole prompt prefilled in one batch; the request runs."""
        self.prefill_done(self.prefill([req]))

    def decode(self) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        s = self.sched
        self._room(len(s.running_batch.reqs))
        for req in s.running_batch.reqs:
            held, pos = self.record(req), self.allocated(req)
            s.req_to_token_pool.write(
                (held.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            self._grown(req, pos + 1)
            req.output_ids.append(8)
        s.running_batch.forward_mode = ForwardMode.DECODE
        s.last_batch = s.running_batch
        s.forward_ct += 1

    def chunk_boundary(self) -> None:
        """get_next_batch_to_run on a chunked request: the chunk goes to the tree (0.5.23:
        ``checkpoint_kv_cache``); up to 0.5.6 the row goes back, the Mamba slot kept (the fixed step)."""
        s = self.sched
        if self.release.tree_lock:
            from sglang.srt.mem_cache.common import checkpoint_kv_cache

            checkpoint_kv_cache(s.chunked_req, s.tree_cache)
            return
        if self.release.unified_tree:  # 0.5.17 - 0.5.21: the tree's own chunk boundary
            s.tree_cache.cache_unfinished_req(s.chunked_req, chunked=True)
            return
        s.tree_cache.cache_unfinished_req(s.chunked_req, chunked=True)
        if self.release.legacy and s.cache_params is None:  # a plain model's row: nothing else
            s.req_to_token_pool.free(s.chunked_req.req_pool_idx)
        elif self.release.legacy:
            s.req_to_token_pool.free(s.chunked_req.req_pool_idx, free_mamba_cache=False)

    def release_req(self, req: Any, *, insert: bool = True) -> None:
        """The release of a finished (``insert``: into the tree) or retracted request, in the
        release's order."""
        s = self.sched
        if req in s.running_batch.reqs:
            s.running_batch.reqs.remove(req)
        if self.release.unified_tree:
            from sglang.srt.mem_cache.common import release_kv_cache

            if self.release.tree_lock:
                release_kv_cache(req, s.tree_cache, checkpoint=insert)
            else:
                release_kv_cache(req, s.tree_cache, is_insert=insert)
            return
        if self.release.insert_flag or s.cache_params is None:  # (0.5.4's RadixCache takes is_insert)
            s.tree_cache.cache_finished_req(req, is_insert=insert)
        else:  # 0.5.4's MambaRadixCache always inserts
            s.tree_cache.cache_finished_req(req)
        if not self.release.legacy and req.req_pool_idx is not None:  # (a session keeps the row)
            start, end = req.pop_overallocated_kv_cache()
            assert start == end
            s.req_to_token_pool.free(req)

    def finish(self, req: Any, *, abort: bool = False) -> None:
        from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH

        req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
        self.release_req(req, insert=not (abort and self.release.unified_tree))

    def retract(self, req: Any) -> None:
        """retract_decode's release: nothing goes to the tree, the request waits to run again."""
        self.release_req(req, insert=False)
        req.reset_for_retract()
        self.sched.waiting_queue.append(req)

    def evict(self, *, tokens: int, mamba: int) -> None:
        """The tree's eviction of ``tokens`` KV slots and ``mamba`` Mamba slots (a plain model's
        tree holds no Mamba slots: its KV only)."""
        tree, dense = self.sched.tree_cache, self.sched.cache_params is None
        if not self.release.evict_params:
            tree.evict(tokens)
            if not dense:
                tree.evict_mamba(mamba)
            return
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        if self.release.unified_tree:
            tree.evict(EvictParams(num_tokens=tokens, mamba_num=mamba))
            return
        tree.evict(EvictParams(num_tokens=tokens))
        if not dense:
            tree.evict(EvictParams(num_tokens=0, mamba_num=mamba))

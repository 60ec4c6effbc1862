"""The unified tree's extend step in an SGLang release's own API (run in its venv): the match and
the lock of a new request, its row, its prefix and the round's new KV, its lengths recorded.

Two APIs: 0.5.23 locks the matched node with ``tree.lock`` (kept on ``req.lock``) and reads the
prefix through ``prefix_device_indices``; 0.5.17 - 0.5.21 lock it with ``inc_lock_ref`` and write
``prefix_indices`` (0.5.17 makes the request's ``ReqKvInfo`` at its first allocation, as its
``alloc_for_extend`` does).  A mixin of :class:`~rigs.sglang.steps.Steps`, which gives it the
room, the lengths and the rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rigs.sglang.releases import Release

__all__ = ["Extend"]


class Extend:
    """prepare_for_extend on the unified tree (0.5.17 on)."""

    release: Release
    sched: Any
    _room: Callable[[int], None]
    allocated: Callable[[Any], int]
    _grown: Callable[[Any, int], None]
    load_back: Callable[[Any], None]

    def _extend_v1(self, req: Any, chunk: int | None) -> None:
        """0.5.17 - 0.5.21's prepare_for_extend: the match and ``inc_lock_ref`` (a new request), the
        row (``alloc(reqs)``), the prefix and the new KV, the lengths where ``alloc_for_extend``
        records them (0.5.17: a ``ReqKvInfo`` made at the first allocation)."""
        s, kv = self.sched, self.release.kv_lens == "req.kv"
        self._room(len(req.origin_input_ids) + 8)
        allocated = self.allocated(req) if (req.kv is not None and (not kv or req.kv.holds_kv)) else 0
        if not allocated:
            req.init_next_round_input(s.tree_cache)
            self.load_back(req)  # (HiCache: the prefix's host part back on the device)
            s.tree_cache.inc_lock_ref(req.last_node)
        whole, pre = len(req.origin_input_ids), len(req.prefix_indices)
        upto = whole if chunk is None else min(pre + chunk, whole)
        row = s.req_to_token_pool.alloc([req])[0]
        if not allocated and pre:
            s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
        start = max(allocated, pre)
        s.req_to_token_pool.write((row, slice(start, upto)), s.token_to_kv_pool_allocator.alloc(upto - start))
        if not kv and req.kv is None:
            from sglang.srt.managers.schedule_batch import ReqKvInfo

            req.kv = ReqKvInfo(kv_allocated_len=upto, swa_evicted_seqlen=0)
        self._grown(req, upto)
        req.set_extend_range(start, upto)
        if chunk is not None or req is s.chunked_req:
            s.chunked_req = req if upto < whole else None

    def _extend(self, req: Any, chunk: int | None) -> None:
        """0.5.23's prepare_for_extend: the match and the lock (a new request), the row, the prefix
        and the new KV up to ``chunk`` tokens past the prefix (the whole prompt without ``chunk``)."""
        s = self.sched
        self._room(len(req.origin_input_ids) + 8)
        if not req.kv.holds_kv:
            req.init_next_round_input(s.tree_cache)
            self.load_back(req)  # (HiCache: the prefix's host part back on the device)
            req.lock = s.tree_cache.lock(req.last_node)
        whole, pre = len(req.origin_input_ids), req.prefix_len
        upto = whole if chunk is None else min(pre + chunk, whole)
        row = s.req_to_token_pool.alloc([req])[0]
        if not req.kv.kv_allocated_len and pre:
            s.req_to_token_pool.write((row, slice(0, pre)), s.tree_cache.prefix_device_indices(req))
        start = max(req.kv.kv_allocated_len, pre)
        s.req_to_token_pool.write((row, slice(start, upto)), s.token_to_kv_pool_allocator.alloc(upto - start))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.extend_end = upto
        if chunk is not None or req is s.chunked_req:
            s.chunked_req = req if upto < whole else None

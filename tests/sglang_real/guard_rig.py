"""One rank of a Mamba hybrid model on SGLang's own classes, for every family from 0.5.4 to 0.5.12.

The pools (``HybridReqToTokenPool``, ``TokenToKVPoolAllocator``), the tree (``MambaRadixCache``)
and the idle checks (``SchedulerRuntimeCheckerMixin``) are the running release's own; the rig
moves real ``Req`` objects through them the way that family's scheduler does, with the family's
API: ``alloc(n, reqs)`` / ``free(row)`` and the chunked row freed at each chunk boundary up to
0.5.6; ``alloc(reqs)`` / ``free(req)`` and ``release_kv_cache``'s order from 0.5.9; the
``kv_committed_len`` / ``kv_allocated_len`` fields from 0.5.5.post3.  Constructors are called with
the keywords each release's signature takes, so the same rig builds 0.5.5.post3 and 0.5.6 (their
wheels' ``sglang`` package on the 0.5.4.post1 venv) and 0.5.10 and 0.5.12 (on the 0.5.9 venv).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from check_release import Batch
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH, Req
from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

__all__ = ["Rig"]

KV, ROWS = 256, 8
LEGACY = ("0.5.4", "0.5.5.post3", "0.5.6")  # alloc(n, reqs) / free(row); the chunked row freed per chunk


def build(cls: Any, **kwargs: Any) -> Any:
    """``cls(**kwargs)`` with the keywords this release's constructor takes."""
    takes = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in takes})


def _tree(pool: Any, alloc: Any) -> Any:
    try:
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    except ImportError:  # 0.5.4, 0.5.5.post3: positional
        return MambaRadixCache(pool, alloc, page_size=1)
    return MambaRadixCache(
        CacheInitParams(disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc, page_size=1)
    )


class Holder(SchedulerRuntimeCheckerMixin):
    """A scheduler-shaped object over the release's pools with its own checker mixin."""

    enable_metrics = False
    enable_hisparse = False

    def __init__(self, mode: str, mamba: int) -> None:
        shape = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=32,
            n_groups=1,
            num_heads=2,
            head_dim=16,
            state_size=4,
            conv_kernel=4,
        )
        self.req_to_token_pool = build(
            HybridReqToTokenPool,
            size=ROWS,
            mamba_size=mamba,
            mamba_spec_state_size=0,
            max_context_len=160,
            device="cpu",
            enable_memory_saver=False,
            cache_params=Mamba2CacheParams(shape=shape, layers=[0]),
            mamba_layer_ids=[0],
            enable_mamba_extra_buffer=False,
            enable_overlap_schedule=False,
        )
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            KV, torch.float16, "cpu", None, need_sort=False
        )
        self.tree_cache = _tree(self.req_to_token_pool, self.token_to_kv_pool_allocator)
        self.max_total_num_tokens = KV
        self.is_hybrid = self.is_hybrid_swa = False
        self.is_hybrid_gdn = self.is_hybrid_ssm = True
        self.disaggregation_mode = DisaggregationMode(mode)
        self.running_batch = Batch([], ForwardMode.DECODE)
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.waiting_queue: list[Any] = []
        self.grammar_queue: list[Any] = []
        self.grammar_manager = Batch([], None)
        self.grammar_manager.grammar_queue = []  # type: ignore[attr-defined]
        self.disagg_prefill_inflight_queue: list[Any] = []
        self.disagg_prefill_bootstrap_queue = Batch([], None)
        self.disagg_prefill_bootstrap_queue.queue = []  # type: ignore[attr-defined]
        self.enable_overlap = False
        self.page_size, self.tp_rank, self.pp_rank, self.dp_rank = 1, 0, 0, None
        self.sessions: dict[str, Any] = {}

    def recv_requests(self) -> list[Any]:
        return []

    def _session_held_tokens(self) -> int:
        return 0

    _session_held_full_tokens = _session_held_mamba_slots = _session_held_tokens

    if not hasattr(SchedulerRuntimeCheckerMixin, "_get_mamba_token_info"):  # up to 0.5.5.post3
        from sglang.srt.managers.scheduler import Scheduler

        _get_mamba_token_info = Scheduler._get_mamba_token_info


class Rig:
    """The scheduler's steps on one ``Holder``, in the family's API."""

    def __init__(self, family: str, mode: str = "null", mamba: int = 32) -> None:
        self.family, self.legacy = family, family in LEGACY
        self.lens = family != "0.5.4"  # kv_committed_len / kv_allocated_len
        self.sched = Holder(mode, mamba)

    def arrive(self, rid: str, ids: list[int], max_new: int = 4) -> Req:
        return Req(rid, "", ids, SamplingParams(max_new_tokens=max_new))

    def _room(self, tokens: int) -> None:
        """What the scheduler's allocation helpers do first: evict the tree until ``tokens`` KV slots
        and two Mamba slots (a request's and a copy-on-write one) are free."""
        s = self.sched
        short_kv = tokens - s.token_to_kv_pool_allocator.available_size()
        short_mamba = 2 - s.req_to_token_pool.mamba_pool.available_size()
        if short_kv > 0 or short_mamba > 0:
            self.evict(tokens=max(short_kv, 0), mamba=max(short_mamba, 0))

    def _row(self, req: Req) -> int:
        pool = self.sched.req_to_token_pool
        if self.legacy:
            req.req_pool_idx = pool.alloc(1, [req])[0]
            return int(req.req_pool_idx)
        return int(pool.alloc([req])[0])

    def prefill(self, reqs: list[Req], chunk: int | None = None) -> Batch:
        """init_next_round_input + the adder + prepare_for_extend, then the forward."""
        s = self.sched
        for req in reqs:
            self._room(len(req.origin_input_ids) + 8)
            if req is s.chunked_req:  # a continuing chunk keeps the prefix cache_unfinished_req set
                req.init_next_round_input()
            else:
                req.init_next_round_input(s.tree_cache)
                s.tree_cache.inc_lock_ref(req.last_node)
            if chunk is not None:
                req.fill_ids = req.fill_ids[: len(req.prefix_indices) + chunk]
                s.chunked_req = req if len(req.fill_ids) < len(req.origin_input_ids) else None
            row = self._row(req)
            pre, fill = len(req.prefix_indices), len(req.fill_ids)
            s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
            s.req_to_token_pool.write((row, slice(pre, fill)), s.token_to_kv_pool_allocator.alloc(fill - pre))
            if self.lens:
                req.kv_committed_len = req.kv_allocated_len = fill
            if not self.legacy and s.chunked_req is req:
                req.is_chunked += 1
        batch = Batch(reqs, ForwardMode.EXTEND)
        s.last_batch = batch
        return batch

    def prefill_done(self, batch: Batch) -> None:
        """process_batch_result_prefill: one token for finished prompts, cached unfinished."""
        s = self.sched
        for req in batch.reqs:
            if not self.legacy and req.is_chunked > 0:
                req.is_chunked -= 1
            if req is s.chunked_req:
                continue
            req.output_ids.append(7)
            s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)

    def decode(self) -> None:
        s = self.sched
        self._room(len(s.running_batch.reqs))
        for req in s.running_batch.reqs:
            pos = req.kv_allocated_len if self.lens else len(req.origin_input_ids) + len(req.output_ids) - 1
            s.req_to_token_pool.write(
                (req.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            if self.lens:
                req.kv_committed_len += 1
                req.kv_allocated_len += 1
            req.output_ids.append(8)
        s.running_batch.forward_mode = ForwardMode.DECODE
        s.last_batch = s.running_batch

    def chunk_boundary(self) -> None:
        """get_next_batch_to_run on a chunked request: stash the chunk in the tree (and up to 0.5.6
        give the row back, keeping the Mamba slot: the fixed step)."""
        s = self.sched
        s.tree_cache.cache_unfinished_req(s.chunked_req, chunked=True)
        if self.legacy:
            s.req_to_token_pool.free(s.chunked_req.req_pool_idx, free_mamba_cache=False)

    def release(self, req: Req, *, insert: bool = True) -> None:
        """The release of a finished (or retracted) request, in the family's order."""
        s = self.sched
        if "is_insert" in inspect.signature(s.tree_cache.cache_finished_req).parameters:
            s.tree_cache.cache_finished_req(req, is_insert=insert)
        else:  # 0.5.4's MambaRadixCache always inserts
            s.tree_cache.cache_finished_req(req)
        if not self.legacy:
            start, end = req.pop_overallocated_kv_cache()
            assert start == end
            s.req_to_token_pool.free(req)
        if req in s.running_batch.reqs:
            s.running_batch.reqs.remove(req)

    def finish(self, req: Req, *, abort: bool = False) -> None:
        req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
        self.release(req)

    def retract(self, req: Req) -> None:
        """retract_decode's release_req: the request's KV and slot go back, nothing is inserted, and
        it waits to be scheduled again."""
        self.release(req, insert=False)
        req.reset_for_retract()
        self.sched.waiting_queue.append(req)

    def evict(self, *, tokens: int, mamba: int) -> None:
        tree = self.sched.tree_cache
        if self.legacy:
            tree.evict(tokens)
            tree.evict_mamba(mamba)
            return
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        tree.evict(EvictParams(num_tokens=tokens))
        tree.evict(EvictParams(num_tokens=0, mamba_num=mamba))

    def idle_leak(self) -> str:
        """SGLang's own idle check of the pools and the request rows: '' when it passes."""
        s = self.sched
        if hasattr(s, "_check_mamba_memory"):
            leak, message = s._check_mamba_memory()
        else:  # 0.5.12: the pool invariants of on_idle
            stats = s._get_mamba_token_info()
            checks = [s._check_full_pool(stats), s._check_mamba_pool(stats)]
            leak, message = any(c[0] for c in checks), "; ".join(c[1] for c in checks if c[0])
        try:
            s._check_req_pool()
        except ValueError as exc:
            return str(exc)
        return str(message) if leak else ""

    def state(self) -> dict[str, Any]:
        """What a later allocation would be handed, and the tree's counters (for 'as if never called')."""
        s = self.sched
        alloc, pool, tree = s.token_to_kv_pool_allocator, s.req_to_token_pool, s.tree_cache
        return {
            "kv_free": alloc.free_pages.tolist() + alloc.release_pages.tolist(),
            "mamba_free": pool.mamba_pool.free_slots.tolist(),
            "rows_free": list(pool.free_slots),
            "tree": (tree.full_evictable_size(), tree.full_protected_size(), tree.mamba_evictable_size()),
        }

"""SGLang 0.5.9 / 0.5.10: Mamba ids 1..size, free(req) + free_mamba_cache(req), kv_*_len fields,
a chunked request keeps its row across chunks (so the #12994 class is gone; a double free is
injected through the real API instead)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from check_release import CONFIG, Batch, Driver, gaps, report, set_server_args
from drive_054 import MAMBA, Driver054
from guard_flow import guard_checks
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import FINISH_LENGTH
from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin as Checks
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.lifecycle import attach, detach, install
from poolwatch.probe.sglang.engine import SGLANG

KV, ROWS = 256, 4


class Holder:
    _get_mamba_token_info = Checks._get_mamba_token_info
    _check_mamba_memory = Checks._check_mamba_memory
    _check_req_pool = Checks._check_req_pool
    process_prefill_chunk = SchedulerDisaggregationPrefillMixin.process_prefill_chunk

    def __init__(self, mode: str, mamba: int = MAMBA) -> None:
        shape = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=32,
            n_groups=1,
            num_heads=2,
            head_dim=16,
            state_size=4,
            conv_kernel=4,
        )
        self.req_to_token_pool = HybridReqToTokenPool(
            size=ROWS,
            mamba_size=mamba,
            mamba_spec_state_size=0,
            max_context_len=128,
            device="cpu",
            enable_memory_saver=False,
            cache_params=Mamba2CacheParams(shape=shape, layers=[0]),
            enable_mamba_extra_buffer=False,
        )
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            KV, torch.float16, "cpu", None, need_sort=mode != "null"
        )
        self.tree_cache = MambaRadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
                page_size=1,
            )
        )
        self.max_total_num_tokens = KV
        self.is_hybrid_swa, self.is_hybrid_ssm = False, True
        self.disaggregation_mode = DisaggregationMode(mode)
        self.running_batch = Batch([], ForwardMode.DECODE)
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.waiting_queue: list[Any] = []
        self.grammar_manager = Batch([], None)
        self.grammar_manager.grammar_queue = []  # type: ignore[attr-defined]
        self.disagg_prefill_inflight_queue: list[Any] = []
        self.disagg_prefill_bootstrap_queue = Batch([], None)
        self.disagg_prefill_bootstrap_queue.queue = []  # type: ignore[attr-defined]
        self.enable_overlap = False
        self.page_size, self.tp_rank, self.pp_rank, self.dp_rank = 1, 0, 0, None

    def recv_requests(self) -> list[Any]:
        return []

    def self_check_during_idle(self) -> tuple[bool, str]:
        return self._check_mamba_memory()


class Driver059(Driver054):
    version = "0.5.9"
    seed_live = False  # its process_prefill_chunk keeps the Mamba slot (the fix is in)
    checks_with_last_batch_set = False  # the scenario is 0.5.4's; 0.5.9's decision: test_final_on_emulator

    def new(self, mode: str = "null") -> Any:
        set_server_args()
        install(SGLANG, Holder, CONFIG)
        self.sched = Holder(mode, self.mamba_size)
        return self.sched

    def finish_transferred(self, req: Any) -> None:
        self.finish(req)

    def strict_check(self) -> None:
        """SGLang's idle check as it raises (the message it raises with)."""
        leak, message = self.sched._check_mamba_memory()
        if leak:
            raise ValueError("token_to_kv_pool_allocator memory leak detected! " + message)
        self.sched._check_req_pool()

    def scenario_guard(self) -> None:
        """The fixed release: the same PD prefill chunk flow with the guard on repairs nothing."""
        self.mamba_size = 32
        try:
            guard_checks(self, buggy=False, strict_check=self.strict_check, chunk_step=self.chunk_step)
        finally:
            self.mamba_size = MAMBA

    def scenarios(self) -> list[tuple[str, Any]]:
        return [*super().scenarios(), ("guard v2 on free_mamba_cache", self.scenario_refuse_request_free)]

    def scenario_refuse_request_free(self) -> None:
        """The split free API (0.5.9 - 0.5.12): ``free_mamba_cache(chunked_req)`` frees the slot and
        clears the request's pointer; guard v2 refuses the call whole, so the request keeps both."""
        for guard in (False, True):
            s = self.new("prefill")
            detach(s)
            attach(SGLANG, s, replace(CONFIG, guard=guard), serve=False)
            c = self.arrive("c", list(range(200, 230)))
            self.prefill([c], chunk=8)
            self.chunk_boundary()
            held = c.mamba_pool_idx
            s.req_to_token_pool.free_mamba_cache(c)  # the fault
            free = [int(i) for i in s.req_to_token_pool.mamba_pool.free_slots.tolist()]
            snap = self.boundary()
            detail = {"slot": int(held), "pointer": c.mamba_pool_idx, "gaps": gaps(snap)}
            if not guard:
                report(
                    "free_mamba_cache of the live chunked request, guard off: the slot goes back and the "
                    "request's pointer is cleared (its state is lost; the books balance)",
                    c.mamba_pool_idx is None and int(held) in free and gaps(snap)["mamba"] == 0,
                    detail,
                )
                continue
            repairs = [(r.kind.value, r.count, r.hook) for r in snap.repairs]
            report(
                "free_mamba_cache of the live chunked request, guard on: refused whole -- the request keeps "
                "its slot, the slot stays off the free list, one refusal",
                c.mamba_pool_idx is held
                and int(held) not in free
                and repairs == [("refuse", 1, "free_mamba_cache")],
                {**detail, "repairs": repairs},
            )
            self.chunk_boundary()
            self.prefill_done(self.prefill([c], chunk=64))
            self.finish(c)
            s.last_batch = None
            report(
                "guard on: SGLang's own idle check passes afterwards", not self.idle_agrees("refused whole")
            )

    def prefill(self, reqs: list[Any], chunk: int | None = None) -> Batch:
        s = self.sched
        for req in reqs:
            continuing = req is s.chunked_req
            if continuing:
                req.init_next_round_input()
            else:
                req.init_next_round_input(s.tree_cache)
                s.tree_cache.inc_lock_ref(req.last_node)
            if chunk is not None:
                req.fill_ids = req.fill_ids[: len(req.prefix_indices) + chunk]
                s.chunked_req = req if len(req.fill_ids) < len(req.origin_input_ids) else None
            req.extend_input_len = len(req.fill_ids) - len(req.prefix_indices)
            row = s.req_to_token_pool.alloc([req])[0]
            pre, fill = len(req.prefix_indices), len(req.fill_ids)
            s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
            s.req_to_token_pool.write((row, slice(pre, fill)), s.token_to_kv_pool_allocator.alloc(fill - pre))
            req.kv_committed_len = req.kv_allocated_len = fill
            if s.chunked_req is req:
                req.is_chunked += 1
        batch = Batch(reqs, ForwardMode.EXTEND)
        s.last_batch = batch
        return batch

    def prefill_done(self, batch: Batch) -> None:
        s = self.sched
        for req in batch.reqs:
            if req.is_chunked > 0:
                req.is_chunked -= 1
            if req is s.chunked_req:
                continue
            req.output_ids.append(7)
            s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)

    def decode(self) -> None:
        s = self.sched
        for req in s.running_batch.reqs:
            pos = req.kv_allocated_len
            s.req_to_token_pool.write(
                (req.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
            )
            req.kv_committed_len += 1
            req.kv_allocated_len += 1
            req.output_ids.append(8)
        s.last_batch = s.running_batch

    def finish(self, req: Any) -> None:
        """release_kv_cache without the global server args: insert, drop the lock, free the row."""
        s = self.sched
        req.finished_reason = FINISH_LENGTH(len(req.output_ids))
        s.tree_cache.cache_finished_req(req, is_insert=True)
        start, end = req.pop_overallocated_kv_cache()
        assert start == end
        s.req_to_token_pool.free(req)
        if req in s.running_batch.reqs:
            s.running_batch.reqs.remove(req)

    def chunk_boundary(self) -> None:
        """0.5.9 get_next_batch_to_run: stash the chunk in the tree; the row is kept."""
        self.sched.tree_cache.cache_unfinished_req(self.sched.chunked_req, chunked=True)

    def evict(self, *, tokens: int, mamba: int) -> None:
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        self.sched.tree_cache.evict(EvictParams(num_tokens=tokens))
        self.sched.tree_cache.evict(EvictParams(num_tokens=0, mamba_num=mamba))

    def scenario_seed(self) -> None:
        """The #12994 shape on 0.5.9's API: the chunked request's slot freed behind its back."""
        self.new("prefill")
        c = self.arrive("c", list(range(200, 230)))
        self.prefill([c], chunk=8)
        self.chunk_boundary()
        slot = int(c.mamba_pool_idx)
        self.sched.req_to_token_pool.mamba_pool.free(c.mamba_pool_idx.unsqueeze(0))  # the fault
        self.prefill([c], chunk=8)
        snap = self.boundary()
        wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
        report(
            "injected double free: the census names the live slot found on the free list",
            (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,)) in wires,
            [str(w) for w in wires],
        )
        report(
            "injected double free: a Mamba surplus of one while the full pool balances",
            gaps(snap)["mamba"] == -1 and gaps(snap)["full"] == 0,
            gaps(snap),
        )
        self.chunk_boundary()
        last = self.prefill([c], chunk=64)
        self.prefill_done(last)
        self.finish(c)
        self.sched.last_batch = None
        leak = self.idle_agrees("injected double free at idle")
        report("injected double free: SGLang's own idle check finds it too", leak)


__all__ = ["Driver", "Driver059"]

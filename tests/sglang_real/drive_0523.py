"""SGLang 0.5.23: UnifiedRadixCache, ``req.kv`` (ReqKvInfo), ``mamba_allocator`` (ids 1..size),
request rows 1..size, SGLang's own PoolStats observer and invariant checker.

The scheduler flow of this release (locks, checkpoints, ``release_kv_cache``) is far from the
older ones; this driver holds KV, rows and Mamba slots through the real pools and ``ReqKvInfo``
records and compares the probe with SGLang's own busy-time uncached sum and idle invariant.
The prefix-tree flows are exercised on 0.5.4 and 0.5.9.
"""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch
from check_release import CONFIG, Batch, Driver, gaps, report
from guard_0523 import guard_checks_0523
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
from sglang.srt.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker
from sglang.srt.managers.scheduler_components.pool_stats_observer import SchedulerPoolStatsObserver
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Phase, Pool
from poolwatch.probe.lifecycle import attach, detach, install
from poolwatch.probe.sglang.engine import SGLANG

KV, MAMBA, ROWS = 256, 12, 4
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-qwen3-next")


def publish_server_args() -> None:
    """A real ServerArgs, resolved against a weightless Qwen3-Next config, published the way the
    scheduler process does (the unified cache reads the Mamba chunk size from it)."""
    from sglang.srt import server_args as sa
    from sglang.srt.runtime_context import mamba_cache_chunk_size

    args = sa.ServerArgs(
        model_path=MODEL, device="cpu", mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True
    )
    sa.set_global_server_args_for_scheduler(args)
    mamba_cache_chunk_size()


class Holder:
    def __init__(self) -> None:
        shape = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=32,
            n_groups=1,
            num_heads=2,
            head_dim=16,
            state_size=4,
            conv_kernel=4,
        )
        params = Mamba2CacheParams(shape=shape, layers=[0])
        self.req_to_token_pool = HybridReqToTokenPool(
            size=ROWS,
            mamba_size=MAMBA,
            mamba_spec_state_size=0,
            max_context_len=128,
            device="cpu",
            enable_memory_saver=False,
            cache_params=params,
            mamba_layer_ids=[0],
            enable_mamba_extra_buffer=False,
            enable_overlap_schedule=False,
        )
        self.req_to_token_pool.cache_params_for_test = params  # type: ignore[attr-defined]
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            KV, torch.float16, "cpu", None, need_sort=False
        )
        self.tree_cache = UnifiedRadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
                page_size=1,
                tree_components=(ComponentType.FULL, ComponentType.MAMBA),
            )
        )
        self.max_total_num_tokens = KV
        self.is_hybrid_swa, self.is_hybrid_ssm = False, True
        self.disaggregation_mode = DisaggregationMode("null")
        self.running_batch = Batch([], ForwardMode.DECODE)
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.waiting_queue: list[Any] = []
        self.grammar_manager = SimpleNamespace(grammar_queue=[])
        self.enable_overlap = False
        self.page_size, self.tp_rank, self.pp_rank, self.dp_rank = 1, 0, 0, None
        self.pool_stats_observer = SchedulerPoolStatsObserver(
            tree_cache=self.tree_cache,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            req_to_token_pool=self.req_to_token_pool,
            session_controller=SimpleNamespace(sessions={}),
            hisparse_coordinator=None,
            is_hybrid_swa=False,
            is_hybrid_ssm=True,
            enable_hisparse=False,
            full_tokens_per_layer=None,
            swa_tokens_per_layer=None,
            max_total_num_tokens=KV,
        )
        self.invariant_checker = SchedulerInvariantChecker(
            is_hybrid_swa=False,
            is_hybrid_ssm=True,
            disaggregation_mode=self.disaggregation_mode,
            page_size=1,
            full_tokens_per_layer=None,
            swa_tokens_per_layer=None,
            max_total_num_tokens=KV,
            tree_cache=self.tree_cache,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            req_to_token_pool=self.req_to_token_pool,
            pool_stats_observer=self.pool_stats_observer,
            get_last_batch=lambda: self.last_batch,
            get_running_batch=lambda: self.running_batch,
            scheduler_stage_metrics=None,
            get_chunked_req=lambda: self.chunked_req,
        )

    def ingest_requests(self) -> list[Any]:
        return []

    def on_idle(self) -> tuple[bool, list[str]]:
        return self.invariant_checker._check_all_pools(self.pool_stats_observer.get_pool_stats())


class Driver0523(Driver):
    version = "0.5.23"

    def new(self) -> Holder:
        publish_server_args()
        install(SGLANG, Holder, CONFIG)
        self.sched = Holder()
        return self.sched

    def boundary(self) -> Any:
        self.sched.recv_requests = self.sched.ingest_requests  # the base class calls recv_requests
        return super().boundary()

    def admit(self, rid: str, prompt: int) -> Req:
        """A prefilled request: a row, ``prompt`` private KV slots and a Mamba slot."""
        s = self.sched
        req = Req(rid, "", list(range(prompt)), SamplingParams(max_new_tokens=4))
        req.kv.mamba_pool_idx = s.req_to_token_pool.mamba_allocator.alloc(1)[0]
        row = s.req_to_token_pool.alloc([req])[0]
        s.req_to_token_pool.write((row, slice(0, prompt)), s.token_to_kv_pool_allocator.alloc(prompt))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = prompt
        req.output_ids.append(7)
        s.running_batch.reqs.append(req)
        s.last_batch = s.running_batch
        return req

    def release(self, req: Req) -> None:
        """Give everything back through the pools (no tree insert)."""
        s = self.sched
        req.finished_reason = FINISH_LENGTH(1)
        s.token_to_kv_pool_allocator.free(
            s.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : req.kv.kv_allocated_len]
        )
        s.req_to_token_pool.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
        req.kv.mamba_pool_idx = None
        s.req_to_token_pool.free(req)
        s.running_batch.reqs.remove(req)

    def agrees_while_busy(self, label: str) -> None:
        snap = self.boundary()
        full_uncached, _ = self.sched.invariant_checker._get_total_uncached_sizes()
        held = snap.pools[Pool.FULL].held
        report(
            f"{label}: the probe's held KV equals SGLang's own uncached sum, every gap is 0",
            held == full_uncached and all(v == 0 for v in gaps(snap).values()) and not snap.tripwires,
            {"probe_held": held, "sglang_uncached": full_uncached, "gaps": gaps(snap)},
        )

    def idle_agrees(self, label: str) -> bool:
        snap = self.boundary()
        leak, messages = self.sched.on_idle()
        probe_gap = gaps(snap)
        report(
            f"{label}: at idle the probe agrees with SGLang's invariant checker",
            snap.phase is Phase.IDLE
            and leak == any(probe_gap.values())
            and not any(a.unreadable for a in snap.pools.values()),
            {"probe": probe_gap, "sglang_leak": leak, "sglang": messages},
        )
        return bool(leak)

    def scenario_busy_then_idle(self) -> None:
        self.new()
        a = self.admit("a", 10)
        self.agrees_while_busy("one running request")
        b = self.admit("b", 6)
        self.agrees_while_busy("two running requests")
        snap = self.boundary()
        report(
            "0.5.23 ids: Mamba slots and request rows start at 1",
            int(a.kv.mamba_pool_idx) >= 1 and a.kv.req_pool_idx >= 1 and snap.pools[Pool.MAMBA].held == 2,
            {"mamba": int(a.kv.mamba_pool_idx), "row": a.kv.req_pool_idx},
        )
        self.release(a)
        self.release(b)
        self.sched.last_batch = None
        self.idle_agrees("after releasing both")

    def scenario_seed(self) -> None:
        self.new()
        a = self.admit("a", 8)
        slot = int(a.kv.mamba_pool_idx)
        self.sched.req_to_token_pool.mamba_allocator.free(a.kv.mamba_pool_idx.unsqueeze(-1))  # the fault
        snap = self.boundary()
        wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
        report(
            "injected double free: the census names the live slot on mamba_allocator's free list",
            (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (slot,)) in wires
            and gaps(snap)["mamba"] == -1
            and gaps(snap)["full"] == 0,
            {
                "tripwires": [str(w) for w in wires],
                "gaps": gaps(snap),
                "probe_error": snap.probe.last_error if snap.probe else None,
            },
        )
        self.release(a)
        self.sched.last_batch = None
        report(
            "injected double free: SGLang's own invariant checker finds it at idle",
            self.idle_agrees("injected double free at idle"),
        )

    def scenario_guard(self) -> None:
        """Guard mode on 0.5.23's layout: a live slot freed behind its back is quarantined from
        ``mamba_allocator.free_slots`` at the next boundary, and SGLang's checker finds nothing."""
        s = self.new()
        detach(s)
        attach(SGLANG, s, replace(CONFIG, guard=True), serve=False)
        a = self.admit("a", 8)
        slot = int(a.kv.mamba_pool_idx)
        s.req_to_token_pool.mamba_allocator.free(a.kv.mamba_pool_idx.unsqueeze(-1))  # the fault
        snap = self.boundary()
        free = [int(i) for i in s.req_to_token_pool.mamba_allocator.free_slots.tolist()]
        repairs = [(r.kind.value, r.slots, r.requests) for r in snap.repairs]
        report(
            "0.5.23 guard: the live slot is taken off mamba_allocator's free list, the pool balances",
            slot not in free and gaps(snap)["mamba"] == 0 and repairs == [("quarantine", (slot,), ("a",))],
            {"slot": slot, "repairs": repairs, "gaps": gaps(snap)},
        )
        self.release(a)
        s.last_batch = None
        report(
            "0.5.23 guard: SGLang's invariant checker finds nothing at idle", not self.idle_agrees("guarded")
        )

    def with_checkpoints(self) -> Any:
        """A fresh holder whose request pool has SGLang's own int8 Mamba checkpoint pool (what
        ``--enable-int8-mamba-checkpoint`` builds; set directly: no global server-args context)."""
        from sglang.srt.mem_cache.mamba_checkpoint_pool import MambaCheckpointPool

        s = self.new()
        params = s.req_to_token_pool.cache_params_for_test
        heads, d_v, d_k = params.shape.temporal
        s.req_to_token_pool.mamba_ckpt_pool = MambaCheckpointPool(
            num_layers=1,
            num_slots=2 * MAMBA,
            num_heads=heads,
            head_v_dim=d_v,
            head_k_dim=d_k,
            conv_shapes=list(params.shape.conv),
            conv_dtype=params.dtype.conv,
            device="cpu",
            temporal_dtype=params.dtype.temporal,
        )
        return s

    def finish_into_tree(self, req: Req) -> None:
        """SGLang's own release with a checkpoint: the tree keeps the state in the int8 pool."""
        import array

        from sglang.srt.mem_cache.common import release_kv_cache

        self.sched.running_batch.reqs.remove(req)
        req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
        req.finished_reason = FINISH_LENGTH(1)
        release_kv_cache(req, self.sched.tree_cache, checkpoint=True)

    def scenario_int8_checkpoints(self) -> None:
        s = self.with_checkpoints()
        ckpt = s.req_to_token_pool.mamba_ckpt_pool
        a = self.admit("a", 10)
        self.admit("b", 6)
        self.agrees_while_busy("int8 checkpoints, two running requests")
        self.finish_into_tree(a)
        snap = self.boundary()
        tree = s.tree_cache.mamba_evictable_size() + s.tree_cache.mamba_protected_size()
        active, checkpoints = snap.pools[Pool.MAMBA], snap.pools.get(Pool.MAMBA_CKPT)
        usual = active.available + tree + active.held - active.size  # the tree's states read as active
        report(
            "int8 checkpoints: a finished request's state is cached in the checkpoint pool; the probe "
            "reads the active pool with evictable 0 and the checkpoint pool as SGLang's mamba-int8 check",
            tree == 1
            and checkpoints is not None
            and (checkpoints.size, checkpoints.available, checkpoints.evictable)
            == (ckpt.num_slots, ckpt.available_size(), 1)
            and active.evictable == 0
            and gaps(snap)["mamba"] == 0
            and gaps(snap)["mamba_ckpt"] == 0
            and usual == tree
            and not snap.tripwires,
            {
                "gaps": gaps(snap),
                "usual_reading_surplus": usual,
                "tripwires": [str(t) for t in snap.tripwires],
            },
        )
        for req in list(s.running_batch.reqs):
            self.release(req)
        s.last_batch = None
        leak = self.idle_agrees("int8 checkpoints at idle, the tree holding one checkpoint")
        report("int8 checkpoints: SGLang's two Mamba checks pass at idle, as the probe says", not leak)
        held = s.tree_cache.all_mamba_values_flatten()[:1].clone()
        ckpt.free(held)  # a checkpoint slot the tree holds, freed behind its back (guard off)
        leak = self.idle_agrees("int8 checkpoints: a tree-held checkpoint slot on the free list")
        snap = self.sched._poolwatch_probe.latest
        wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
        report(
            "int8 checkpoints, named by slot id: a tree-held checkpoint slot on the free list is a surplus "
            "of 1 on mamba_ckpt and the census names it (free_and_tree), as for the active pool",
            leak
            and gaps(snap)["mamba_ckpt"] == -1
            and (TripwireKind.FREE_AND_TREE, Pool.MAMBA_CKPT, (int(held[0]),)) in wires,
            {"gaps": gaps(snap), "slot": int(held[0]), "tripwires": [str(w) for w in wires]},
        )
        ckpt.allocator.free_slots = ckpt.allocator.free_slots[:-1]  # undo it: the same state as before
        lost = ckpt.alloc(1)  # a checkpoint slot nobody owns: the fault class the int8 check exists for
        leak = self.idle_agrees("int8 checkpoints: a lost checkpoint slot")
        snap = self.sched._poolwatch_probe.latest
        wires = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
        report(
            "int8 checkpoints: a lost checkpoint slot is a deficit of 1 on mamba_ckpt only, as SGLang says, "
            "and the census names the slot at idle (missing)",
            leak
            and gaps(snap)["mamba_ckpt"] == 1
            and gaps(snap)["mamba"] == 0
            and (TripwireKind.MISSING, Pool.MAMBA_CKPT, (int(lost[0]),)) in wires,
            {"gaps": gaps(snap), "slot": int(lost[0]), "tripwires": [str(w) for w in wires]},
        )

    def scenarios(self) -> list[tuple[str, Any]]:
        return [
            ("busy then idle", self.scenario_busy_then_idle),
            ("seed double free", self.scenario_seed),
            ("guard mode", self.scenario_guard),
            ("guard v2", lambda: guard_checks_0523(self)),
            ("int8 Mamba checkpoints", self.scenario_int8_checkpoints),
        ]

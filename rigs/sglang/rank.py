"""One rank of a Mamba hybrid model on an SGLang release's own classes, on CPU (run in the release's
venv).

The pools (``HybridReqToTokenPool``, ``TokenToKVPoolAllocator``), the tree (``MambaRadixCache``, or
0.5.23's ``UnifiedRadixCache``), the idle checks (``SchedulerRuntimeCheckerMixin``, or 0.5.23's
``SchedulerPoolStatsObserver`` and ``SchedulerInvariantChecker``) and the PD prefill chunk step
(``process_prefill_chunk``) are the release's own.  The rank is a scheduler-shaped class made for
the release (:func:`rank_class`) whose loop and idle hooks carry the release's names, so the probe
wraps them as it wraps SGLang's ``Scheduler``; what is stood in for is what the engine's own unit
tests stand in for: no model runs, and the KV transfer to a decode rank is recorded, not sent.
Constructors are called with the keywords the release's signature takes (:func:`build`).

Kept whole: one class, the scheduler-shaped rank -- its constructor builds the release's pools,
tree and idle checker in the order the release's own ``Scheduler`` does, and its methods carry the
names the probe wraps; the plain, SWA and decode ranks' pools are their own modules
(:mod:`rigs.sglang.dense`, :mod:`rigs.sglang.swa`).
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Any

from rigs.sglang.pieces import Batch, build
from rigs.sglang.releases import Check, Release

__all__ = ["MAMBA_LAYER", "Rank", "rank_class"]

# one tiny Mamba2 layer: its conv and temporal state make a slot a few hundred bytes on CPU
MAMBA_LAYER = {"tp_world_size": 1, "intermediate_size": 32, "n_groups": 1, "num_heads": 2, "head_dim": 16,
               "state_size": 4, "conv_kernel": 4}  # fmt: skip


class Rank:
    """A scheduler-shaped rank over the release's pools (use :func:`rank_class`'s subclass)."""

    release: Release
    enable_metrics = False
    enable_hisparse = False
    current_scheduler_metrics_enabled = False

    def __init__(
        self,
        mode: str = "null",
        *,
        kv: int = 256,
        mamba: int = 32,
        rows: int = 8,
        context: int = 160,
        extra_buffer: bool = False,
        dense: str = "",
        pre_alloc: int = 0,
        window: tuple[int, int, bool] | None = None,
        paged: int = 0,
    ) -> None:
        """A Mamba hybrid model's rank; ``dense`` (``chunk``, ``radix`` or ``hiradix``: its tree): a plain
        model's (:func:`rigs.sglang.dense.dense_pools`); ``window`` (page size, sliding window,
        EAGLE): a hybrid SWA model's (:func:`rigs.sglang.swa.swa_pools`); ``paged`` (a page size, 1
        too): a plain model's pools at that page size and chunk cache, EAGLE spec v2 on
        (:func:`rigs.sglang.spec.paged_pools`)."""
        os.environ.setdefault("SGLANG_MAMBA_SSM_DTYPE", "float32")
        if paged:
            from rigs.sglang.spec import paged_pools

            paged_pools(self, self.release, pages=kv // paged, page=paged, rows=rows, width=context)
        elif window:
            from rigs.sglang.swa import swa_pools

            page, size, eagle = window
            swa_pools(self, kv=kv, rows=rows, context=context, page=page, window=size, eagle=eagle)
        elif dense:
            from rigs.sglang.dense import dense_pools

            dense_pools(self, mode, kv=kv, rows=rows, context=context, tree=dense, pre_alloc=pre_alloc)
        else:
            self._mamba_pools(mode, kv=kv, mamba=mamba, rows=rows, context=context, extra_buffer=extra_buffer)
        self.max_total_num_tokens, self.mamba_size = kv, mamba
        swa, ssm = self.release.hybrid_flags
        setattr(self, swa, bool(window))
        setattr(self, ssm, not (dense or window or paged))
        self._fields(mode)

    def _mamba_pools(
        self, mode: str, *, kv: int, mamba: int, rows: int, context: int, extra_buffer: bool
    ) -> None:
        import torch
        from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool

        shape = Mamba2StateShape.create(**MAMBA_LAYER)
        self.cache_params = Mamba2CacheParams(shape=shape, layers=[0])
        self.req_to_token_pool = build(
            HybridReqToTokenPool,
            size=rows,
            mamba_size=mamba,
            mamba_spec_state_size=0,
            max_context_len=context,
            device="cpu",
            enable_memory_saver=False,
            cache_params=self.cache_params,
            mamba_layer_ids=[0],
            enable_mamba_extra_buffer=extra_buffer,  # with its two ping-pong track slots a request
            enable_overlap_schedule=extra_buffer,
        )
        # SGLang sorts the KV free list on a PD rank (the model runner's need_sort)
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            kv, torch.float16, "cpu", None, need_sort=mode != "null"
        )
        self.tree_cache = self._tree(extra_buffer)

    def _fields(self, mode: str) -> None:
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        self.disaggregation_mode = DisaggregationMode(mode)
        self.running_batch = Batch([], ForwardMode.DECODE)
        self.last_batch: Any = None
        self.chunked_req: Any = None
        self.waiting_queue: list[Any] = []
        grammar: Any = [] if self.release.grammar == "grammar_queue" else SimpleNamespace(grammar_queue=[])
        setattr(self, self.release.grammar, grammar)
        self.disagg_prefill_inflight_queue: list[Any] = []
        self.disagg_prefill_bootstrap_queue = SimpleNamespace(queue=[])
        self.enable_overlap = False
        self.forward_ct = 0  # run_batch's count of forward passes (the steps below count theirs)
        self.page_size = getattr(self, "page_size", 1)  # (an SWA rank's pools are paged)
        self.tp_rank, self.pp_rank, self.dp_rank = 0, 0, None
        self.sessions: dict[str, Any] = {}
        self.sent: list[tuple[str, int]] = []  # the KV transfers a PD prefill rank made: (rid, end)
        # the worker of a Mamba hybrid model (0.5.5.post3 and 0.5.6's chunk step ask whether it is one)
        self.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(mambaish_config=self.cache_params))
        if self.release.check is Check.CHECKER:
            self._checker()

    def _tree(self, extra_buffer: bool) -> Any:
        pool, alloc = self.req_to_token_pool, self.token_to_kv_pool_allocator
        if not self.release.tree_params:
            from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache

            return MambaRadixCache(pool, alloc, page_size=1)
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        params: dict[str, Any] = {
            "disable": False,
            "req_to_token_pool": pool,
            "token_to_kv_pool_allocator": alloc,
            "page_size": 1,
        }
        if extra_buffer:
            params["enable_mamba_extra_buffer"] = True
        if not self.release.unified_tree:
            from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache

            return MambaRadixCache(CacheInitParams(**params))
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        params["tree_components"] = (ComponentType.FULL, ComponentType.MAMBA)
        return UnifiedRadixCache(CacheInitParams(**params))

    def _checker(self, sessions: Any = None) -> None:
        """0.5.23's own observer and invariant checker over the rank's pools (``sessions``: the
        session controller, when the rank runs streaming sessions)."""
        from sglang.srt.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker
        from sglang.srt.managers.scheduler_components.pool_stats_observer import SchedulerPoolStatsObserver

        pools = {
            "tree_cache": self.tree_cache,
            "token_to_kv_pool_allocator": self.token_to_kv_pool_allocator,
            "req_to_token_pool": self.req_to_token_pool,
        }
        common = {
            "is_hybrid_swa": getattr(self, "sliding_window_size", None) is not None,
            "is_hybrid_ssm": self.cache_params is not None,
            "full_tokens_per_layer": getattr(self, "full_tokens_per_layer", None),
            "swa_tokens_per_layer": getattr(self, "swa_tokens_per_layer", None),
            "max_total_num_tokens": self.max_total_num_tokens,
            "get_last_batch": lambda: self.last_batch,
            "get_running_batch": lambda: self.running_batch,
        }
        self.pool_stats_observer = build(  # (the keywords the release's dataclass takes)
            SchedulerPoolStatsObserver,
            **pools,
            **common,
            session_controller=sessions or SimpleNamespace(sessions={}),
            hisparse_coordinator=None,
            enable_hisparse=False,
        )
        self.invariant_checker = build(
            SchedulerInvariantChecker,
            **pools,
            **common,
            disaggregation_mode=self.disaggregation_mode,
            page_size=self.page_size,
            pool_stats_observer=self.pool_stats_observer,
            scheduler_stage_metrics=None,
            get_chunked_req=lambda: self.chunked_req,
            server_args=getattr(self, "server_args", None),
        )

    def add_checkpoint_pool(self) -> None:
        """SGLang's own int8 Mamba checkpoint pool (what ``--enable-int8-mamba-checkpoint`` builds;
        set directly: no global server-args context)."""
        from sglang.srt.mem_cache.mamba_checkpoint_pool import MambaCheckpointPool

        params = self.cache_params
        heads, d_v, d_k = params.shape.temporal
        self.req_to_token_pool.mamba_ckpt_pool = MambaCheckpointPool(
            num_layers=1,
            num_slots=2 * self.mamba_size,
            num_heads=heads,
            head_v_dim=d_v,
            head_k_dim=d_k,
            conv_shapes=list(params.shape.conv),
            conv_dtype=params.dtype.conv,
            device="cpu",
            temporal_dtype=params.dtype.temporal,
        )

    # -- what the scheduler's loop calls (the release's hook names: rank_class) ------------------

    def no_requests(self, *_: Any) -> list[Any]:
        """The loop hook: no request arrives from a tokenizer (0.5.13 - 0.5.19's hook,
        ``process_input_requests``, is handed the received list)."""
        return []

    def own_check(self) -> tuple[bool, str]:
        """SGLang's own idle check of the pools, as the release calls it: (leak, message)."""
        dense = self.cache_params is None and not getattr(self, self.release.hybrid_flags[0])  # a plain model
        if self.release.check is Check.MAMBA:
            check = self._check_radix_cache_memory if dense else self._check_mamba_memory  # type: ignore[attr-defined]
            leak, message = check()
            return bool(leak), str(message)
        if self.release.check is Check.POOLS:
            if dense:
                checks = [self._check_full_pool(self._get_token_info())]  # type: ignore[attr-defined]
            else:
                stats = self._get_mamba_token_info()  # type: ignore[attr-defined]
                checks = [self._check_full_pool(stats), self._check_mamba_pool(stats)]  # type: ignore[attr-defined]
            return any(c[0] for c in checks), "; ".join(str(c[1]) for c in checks if c[0])
        leak, messages = self.invariant_checker._check_all_pools(self.pool_stats_observer.get_pool_stats())
        return bool(leak), "; ".join(map(str, messages))

    def send_kv_chunk(self, req: Any, last_chunk: bool = False, end_idx: int | None = None) -> None:
        """A PD prefill rank's KV transfer to its decode rank: recorded, not sent."""
        done = getattr(req, "extend_end", None) or len(getattr(req, "fill_ids", req.origin_input_ids))
        self.sent.append((req.rid, end_idx if end_idx is not None else done))

    def _publish_kv_events(self) -> None:
        return None


@functools.cache
def rank_class(release: Release) -> type[Rank]:
    """The rank class of ``release``: :class:`Rank`, SGLang's own checker mixin (up to 0.5.12) and
    PD prefill chunk step, the loop and idle hooks under the release's names."""
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin

    body: dict[str, Any] = {
        "release": release,
        release.loop_hook: Rank.no_requests,
        release.idle_hook: Rank.own_check,
        "process_prefill_chunk": SchedulerDisaggregationPrefillMixin.process_prefill_chunk,
    }
    if hasattr(SchedulerDisaggregationPrefillMixin, "check_bootstrap"):  # 0.5.13 on: the chunk step
        body["check_bootstrap"] = SchedulerDisaggregationPrefillMixin.check_bootstrap  # asks first
    from rigs.sglang.admission import scheduler_methods
    from rigs.sglang.hicache import decode_methods

    body.update(scheduler_methods())  # admission and aborts, run only by the steps that ask
    body.update(decode_methods())  # the loop's batch selection (HiCache's decode turns)
    bases: tuple[type, ...] = (Rank,)
    if release.check is not Check.CHECKER:
        from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin

        bases += (SchedulerRuntimeCheckerMixin,)
        if not hasattr(SchedulerRuntimeCheckerMixin, "_get_mamba_token_info"):  # on Scheduler up to 0.5.5
            from sglang.srt.managers.scheduler import Scheduler

            body["_get_mamba_token_info"] = Scheduler._get_mamba_token_info
            body["_get_token_info"] = Scheduler._get_token_info
    return type(f"Rank_{release.version.replace('.', '_')}", bases, body)

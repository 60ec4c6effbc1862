"""One emulated SGLang scheduler rank (``managers/scheduler.py``), with SGLang's state names.

Each call of :meth:`Scheduler.run_once` is one iteration of the release's event loop for the
rank's mode (normal, PD prefill, PD decode).  The loop calls SGLang-named methods through
``self`` (``get_next_batch_to_run`` / ``get_next_disagg_*_batch_to_run``,
``process_prefill_chunk``, ``process_batch_result``, ``self_check_during_idle`` or ``on_idle``,
``check_memory``), so a probe can wrap them on the class exactly as it does on SGLang's.  An
exception escapes ``run_once`` as it escapes SGLang's loop; the worker logs it and stops.
"""

from __future__ import annotations

from typing import Any

from poolwatch_emulator.aborts import Abort, SchedulerAbortMixin
from poolwatch_emulator.batching import SchedulerBatchMixin
from poolwatch_emulator.build import DisaggregationMode, RankSettings, build_pools
from poolwatch_emulator.checks import SchedulerRuntimeCheckerMixin
from poolwatch_emulator.clock import SimClock
from poolwatch_emulator.decoding import SchedulerDecodeMixin
from poolwatch_emulator.faults import FaultPlan, FaultSpec
from poolwatch_emulator.logs import RankLog
from poolwatch_emulator.multimodal import SchedulerEncoderMixin, make_encoder_cache
from poolwatch_emulator.offload import DecodeKVCacheOffloadManager
from poolwatch_emulator.pd import SchedulerDisaggDecodeMixin, SchedulerDisaggPrefillMixin
from poolwatch_emulator.req import Req, RequestSpec, ScheduleBatch
from poolwatch_emulator.results import SchedulerResultMixin
from poolwatch_emulator.spec import SchedulerSpecMixin
from poolwatch_emulator.stats import SchedulerMetricsMixin
from poolwatch_emulator.transfer import (
    DecodePreallocQueue,
    DecodeRequest,
    DecodeTransferQueue,
    PrefillBootstrapQueue,
)

__all__ = ["Abort", "Scheduler"]


class _GrammarManager:
    def __init__(self) -> None:
        self.grammar_queue: list[Req] = []

    def __len__(self) -> int:
        return len(self.grammar_queue)


class Scheduler(
    SchedulerBatchMixin,
    SchedulerAbortMixin,
    SchedulerResultMixin,
    SchedulerDecodeMixin,
    SchedulerSpecMixin,
    SchedulerEncoderMixin,
    SchedulerDisaggPrefillMixin,
    SchedulerDisaggDecodeMixin,
    SchedulerRuntimeCheckerMixin,
    SchedulerMetricsMixin,
):
    """One rank: pools, prefix cache, queues and the event loop of its release and mode."""

    def __init__(
        self,
        settings: RankSettings,
        *,
        clock: SimClock,
        log: RankLog,
        faults: tuple[FaultSpec, ...] = (),
        seed: int = 0,
    ):
        self.settings = settings
        self.release = settings.release
        self.clock = clock
        self.logger = log
        self.server_args = settings.server_args()
        self.disaggregation_mode = settings.mode
        self.tp_rank, self.dp_rank, self.pp_rank = settings.tp_rank, settings.dp_rank, 0
        self.attn_tp_rank = settings.tp_rank
        self.tp_size, self.dp_size, self.pp_size = settings.tp_size, settings.dp_size, 1
        self.page_size = settings.shape.page_size
        self.faults = FaultPlan(faults, seed=seed)
        self.token_to_kv_pool_allocator, self.req_to_token_pool, self.tree_cache = build_pools(
            settings, self.faults
        )
        self.max_total_num_tokens = settings.shape.full_kv_tokens
        self.full_tokens_per_layer = settings.shape.full_kv_tokens
        self.swa_tokens_per_layer = settings.shape.swa_kv_tokens or 0
        self.max_running_requests = settings.shape.max_running_requests
        swa_name, ssm_name = self.release.hybrid_attr_names
        setattr(self, swa_name, settings.shape.swa_kv_tokens is not None)
        setattr(self, ssm_name, settings.shape.mamba_slots is not None)
        self.is_mamba_tree = self.tree_cache.supports_mamba()
        self.enable_hierarchical_cache = hasattr(self.tree_cache, "token_to_kv_pool_host")
        self.emu_spec_init(seed)
        self.encoder_cache_manager = make_encoder_cache(settings.encoder_cache, self.faults)
        self.max_num_encoder_input_tokens = (
            settings.encoder_cache.compute_budget if settings.encoder_cache else 0
        )
        self.emu_encoder_scheduled = 0
        self.emu_freed_mm_hashes: list[str] = []
        self.decode_offload_manager: DecodeKVCacheOffloadManager | None = None
        if self.is_decode_mode and settings.decode_offload:
            host = 2 * settings.shape.full_kv_tokens
            self.decode_offload_manager = DecodeKVCacheOffloadManager(
                self.tree_cache, host, self.faults, lambda: clock.now
            )
        self._init_queues()
        self._init_counters()
        self.log_startup()

    def _init_queues(self) -> None:
        self.waiting_queue: list[Req] = []
        self.running_batch = ScheduleBatch()
        self.last_batch: ScheduleBatch | None = None
        self.cur_batch: ScheduleBatch | None = None
        self.chunked_req: Req | None = None
        self.emu_chunk_pending = False
        self.enable_overlap = False
        self.result_queue: list[Any] = []
        if self.release.name == "0.5.4.post1":
            self.grammar_queue: list[Req] = []
        else:
            self.grammar_manager = _GrammarManager()
        self.disagg_prefill_bootstrap_queue = PrefillBootstrapQueue()
        self.disagg_prefill_inflight_queue: list[Req] = []
        self.disagg_decode_prealloc_queue = DecodePreallocQueue()
        self.disagg_decode_transfer_queue = DecodeTransferQueue()
        self.emu_inbox: list[RequestSpec | Abort] = []
        self.emu_transfers: dict[str, Any] = {}

    def _init_counters(self) -> None:
        self.forward_ct = 0
        self.forward_ct_decode = 0
        self.emu_iteration = 0
        self.emu_finished_total = 0
        self.emu_idle_checks = 0  # SGLang's idle check ran (and passed, or warned)
        self.num_generated_tokens = 0
        self.num_retracted_reqs = 0
        self.count_memory_leak_warnings = 0
        self.count_req_pool_leak_warnings = 0
        self.new_token_ratio = self.init_new_token_ratio = 0.7

    def emu_offloading(self) -> bool:
        """Finished decode requests whose KV is still being offloaded (``ongoing_offload``)."""
        return self.decode_offload_manager is not None and bool(self.decode_offload_manager.ongoing_offload)

    @property
    def is_prefill_mode(self) -> bool:
        return self.disaggregation_mode is DisaggregationMode.PREFILL

    @property
    def is_decode_mode(self) -> bool:
        return self.disaggregation_mode is DisaggregationMode.DECODE

    # -- the event loops -------------------------------------------------------------------

    def run_once(self) -> None:
        """One iteration of the event loop of this rank's release and mode."""
        self.emu_iteration += 1
        self.faults.now, self.faults.step = self.clock.now, self.emu_iteration
        if self.is_prefill_mode:
            self._loop_disagg_prefill()
        elif self.is_decode_mode:
            self._loop_disagg_decode()
        else:
            self._loop_normal()
        self.emu_encoder_end_step()

    def _run_and_process(self, batch: ScheduleBatch | None) -> None:
        self.cur_batch = batch
        if batch is not None:
            result = self.run_batch(batch)
            self.process_batch_result(batch, result)

    def _idle(self) -> None:
        if self.release.uses_is_fully_idle:
            self.on_idle()
        else:
            self.self_check_during_idle()

    def _loop_normal(self) -> None:
        self.process_input_requests(self.recv_requests())
        batch = self.get_next_batch_to_run()
        self._run_and_process(batch)
        if batch is None:
            self._idle()
        self.last_batch = batch

    def _loop_disagg_prefill(self) -> None:
        self.process_input_requests(self.recv_requests())
        self.waiting_queue.extend(self.disagg_prefill_bootstrap_queue.pop_bootstrapped())
        if self.release.disagg_prefill_getter:
            batch = self.get_next_disagg_prefill_batch_to_run()
        else:
            self.process_prefill_chunk()
            batch = self.get_new_batch_prefill()
        self._run_and_process(batch)
        if self.disagg_prefill_inflight_queue:
            self.process_disagg_prefill_inflight_queue()
        if batch is None and (self.release.uses_is_fully_idle or not self.disagg_prefill_inflight_queue):
            self._idle()
        self.last_batch = batch
        self.running_batch.batch_is_full = False

    def _loop_disagg_decode(self) -> None:
        self.process_input_requests(self.recv_requests())
        self.process_decode_queue()
        batch = self.get_next_disagg_decode_batch_to_run()
        self.cur_batch = batch
        if batch is not None and batch.forward_mode.is_decode():
            self.process_batch_result(batch, self.run_batch(batch))
        busy = (
            self.waiting_queue
            or self.disagg_decode_transfer_queue.queue
            or self.disagg_decode_prealloc_queue.queue
            or self.emu_offloading()
        )
        if batch is None and (self.release.uses_is_fully_idle or not busy):
            self._idle()
        self.last_batch = batch

    # -- inputs ----------------------------------------------------------------------------

    def recv_requests(self) -> list[RequestSpec | Abort]:
        inbox, self.emu_inbox = self.emu_inbox, []
        return inbox

    def process_input_requests(self, recv_reqs: list[RequestSpec | Abort]) -> None:
        for msg in recv_reqs:
            if isinstance(msg, Abort):
                self.abort_request(msg)
            else:
                self.handle_generate_request(msg)

    def handle_generate_request(self, spec: RequestSpec) -> None:
        req = Req(spec, list(spec.input_ids))
        req.transfer = self.emu_transfers.pop(spec.rid, None)
        if self.is_prefill_mode:
            self.disagg_prefill_bootstrap_queue.queue.append(req)
        elif self.is_decode_mode:
            self.disagg_decode_prealloc_queue.queue.append(DecodeRequest(req))
        else:
            self.waiting_queue.append(req)

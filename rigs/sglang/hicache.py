"""HiCache on a dense rank (``--enable-hierarchical-cache``, the write-through policy) and the decode
turns of the release's own scheduler loop (run in the release's venv).

:func:`hicache_tree` builds the release's own ``HiRadixCache`` over a rank's KV allocator and rows,
with the release's own ``MHATokenToKVPoolHost`` accounting (its KV buffers not allocated) and the
release's own ``HiCacheController`` -- ``write``, ``evict_device``, ``evict_host``, ``reset`` --
of which only the copy is stood in for: ``start_writing`` hands the merged write's node ids to
``ack_write_queue`` with a copy that is already finished (no device stream runs), as a copy that
completes within a step does.  :class:`HiDecode` runs the scheduler's turns through the release's
own ``get_next_batch_to_run`` (the prefill builder, ``update_running_batch`` and its
``check_decode_mem`` / ``retract_decode``); what is stood in for is the model: a prompt's forward
(the row, the KV, a first token), a decode step's (a slot per request, a token), and the request
finishing at its length, released by SGLang's own ``release_kv_cache``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from rigs.sglang.pieces import Batch
from rigs.sglang.releases import Release

__all__ = ["DECODE_METHODS", "HiDecode", "decode_methods", "hicache_tree"]

# the Scheduler's own methods a decode turn runs (get_next_batch_to_run and what it calls)
DECODE_METHODS = (
    "get_next_batch_to_run",
    "update_running_batch",
    "_abort_on_running_timeout",
    "maybe_prepare_mlp_sync_batch",
    "stash_chunked_request",
    "_maybe_prepare_ngram_embedding",
)
HOST_RATIO = 2  # SGLang's default --hicache-ratio: the host pool twice the device's


def decode_methods() -> dict[str, Any]:
    """The release's own :data:`DECODE_METHODS` (where it has them), to bind on its rank class."""
    from sglang.srt.managers.scheduler import Scheduler

    return {name: getattr(Scheduler, name) for name in DECODE_METHODS if hasattr(Scheduler, name)}


class _Done:
    """A device-to-host copy that has finished (``query``: it is done; ``synchronize``: at once)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


def _started_writing(controller: Any) -> None:
    """``HiCacheController.start_writing`` without the copy: the queued writes merged (SGLang's own
    ``CacheOperation.merge_ops``) and acknowledged as finished."""
    from sglang.srt.managers.cache_controller import CacheOperation, HiCacheAck

    if not controller.write_queue:
        return
    op = CacheOperation.merge_ops(controller.write_queue)
    controller.write_queue.clear()
    controller.ack_write_queue.append(HiCacheAck(_Done(), _Done(), op.node_ids))


def _controller(alloc: Any, host: Any) -> Any:
    from sglang.srt.managers.cache_controller import HiCacheController, TransferBuffer

    c = object.__new__(HiCacheController)
    c.mem_pool_device_allocator, c.mem_pool_host, c.mem_pool_device = alloc, host, None
    c.write_policy, c.io_backend, c.page_size, c.enable_storage = "write_through", "direct", 1, False
    c.write_queue, c.load_queue, c.ack_write_queue, c.ack_load_queue = [], [], [], []
    c.stop_event, c.storage_stop_event = threading.Event(), threading.Event()
    c.write_buffer, c.load_buffer = TransferBuffer(c.stop_event), TransferBuffer(c.stop_event)
    c.start_writing = lambda: _started_writing(c)
    return c


def _host_pool(size: int) -> Any:
    from sglang.srt.mem_cache.memory_pool_host import HostKVCache, MHATokenToKVPoolHost

    host = object.__new__(MHATokenToKVPoolHost)
    host.size, host.page_size, host.device, host.lock = size, 1, "cpu", threading.RLock()
    HostKVCache.clear(host)
    return host


def hicache_tree(rank: Any) -> Any:
    """The release's ``HiRadixCache`` over ``rank``'s rows and KV allocator, as its constructor
    sets it up for ``--hicache-write-policy write_through`` with no storage backend."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache
    from sglang.srt.mem_cache.radix_cache import RadixCache

    alloc = rank.token_to_kv_pool_allocator
    tree = object.__new__(HiRadixCache)
    tree._enable_metrics_flag, tree.page_size, tree.kv_cache = False, 1, None
    tree.token_to_kv_pool_host = _host_pool(HOST_RATIO * alloc.size)
    tree.tp_group, tree.tp_world_size, tree.pp_rank, tree.pp_size = None, 1, 0, 1
    tree.enable_storage = tree.enable_storage_metrics = False
    tree.extra_metric_labels = None
    tree.is_prefetch_timeout = tree._prefetch_timeout_check_linear_func
    tree.prefetch_stop_policy = "best_effort"
    tree.load_cache_event = threading.Event()
    tree.cache_controller = _controller(alloc, tree.token_to_kv_pool_host)
    tree._apply_storage_runtime_config(
        storage_backend=None, prefetch_threshold=256, prefetch_timeout_base=1.0,
        prefetch_timeout_per_ki_token=0.25, hicache_storage_pass_prefix_keys=False,
        enable_storage=False, enable_storage_metrics=False, extra_metric_labels=None,
    )  # fmt: skip
    tree.ongoing_write_through, tree.ongoing_load_back, tree.ongoing_prefetch = {}, {}, {}
    tree.ongoing_backup, tree.prefetch_loaded_tokens_by_reqid = {}, {}
    tree.write_through_threshold, tree.load_back_threshold = 1, 10
    tree.evictable_host_leaves = set()
    params = CacheInitParams(
        disable=False, req_to_token_pool=rank.req_to_token_pool, token_to_kv_pool_allocator=alloc, page_size=1
    )
    RadixCache.__init__(tree, params)
    return tree


@functools.cache
def _decode_batch() -> type[_DecodeBatch]:
    """The running batch: :class:`~rigs.sglang.pieces.Batch` with SGLang's own ``check_decode_mem``,
    ``retract_decode`` and ``release_req`` (a retraction), the model's step stood in for."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    names = ("check_decode_mem", "new_tokens_required_next_decode", "retract_decode", "release_req")
    return type("DecodeBatch", (_DecodeBatch,), {n: getattr(ScheduleBatch, n) for n in names})


class _DecodeBatch(Batch):
    is_prefill_only = enable_overlap = False

    def __init__(self, sched: Any) -> None:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        super().__init__([], ForwardMode.DECODE)
        self.tree_cache, self.req_to_token_pool = sched.tree_cache, sched.req_to_token_pool
        self.token_to_kv_pool_allocator = sched.token_to_kv_pool_allocator
        self.spec_algorithm = SpeculativeAlgorithm.NONE

    def filter_batch(self, chunked_req_to_exclude: Any = None, keep_indices: Any = None, **_: Any) -> None:
        if keep_indices is None:
            super().filter_batch(chunked_req_to_exclude)
        else:
            self.reqs = [self.reqs[i] for i in keep_indices]

    def prepare_for_decode(self) -> None:
        """The decode step's allocation: a KV slot per request (SGLang's ``alloc_token_slots``,
        which evicts the tree first), written to its row."""
        import torch
        from sglang.srt.mem_cache.common import alloc_token_slots
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        self.forward_mode = ForwardMode.DECODE
        slots = alloc_token_slots(self.tree_cache, len(self.reqs))
        for req, slot in zip(self.reqs, slots.tolist(), strict=True):
            pos = req.kv_allocated_len
            self.req_to_token_pool.write((req.req_pool_idx, slice(pos, pos + 1)), torch.tensor([slot]))
            req.kv_committed_len = req.kv_allocated_len = pos + 1


class HiDecode:
    """The HiCache turns of a :class:`~rigs.sglang.driver.Driver` on a dense ``hiradix`` rank."""

    release: Release
    sched: Any

    def open_hicache(self) -> None:
        """What the release's ``get_next_batch_to_run`` reads: the admission's attributes
        (:meth:`~rigs.sglang.admission.Admission.open_admission`), HiCache on, no tracing, DP
        attention or speculative decoding, and a running batch of SGLang's decode methods."""
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.open_admission()  # type: ignore[attr-defined]
        s = self.sched
        s.enable_hierarchical_cache, s.require_mlp_sync, s.enable_hisparse = True, False, False
        s.spec_algorithm, s.use_ngram_embedding, s.forward_ct = SpeculativeAlgorithm.NONE, False, 0
        s.new_token_ratio_decay, s.min_new_token_ratio, s.enable_metrics = 0.001, 0.1, False
        s.running_batch = _decode_batch()(s)

    def serve(self, reqs: list[Any]) -> None:
        """A prefill turn's forward: each request's prefix match and lock, its row and KV, its first
        token, the prompt handed to the tree (``cache_unfinished_req``: HiCache writes it through);
        the requests join the running batch."""
        from sglang.srt.mem_cache.common import alloc_token_slots

        s = self.sched
        for req in reqs:
            req.init_next_round_input(s.tree_cache)
            s.tree_cache.inc_lock_ref(req.last_node)
            pre, fill = len(req.prefix_indices), len(req.fill_ids)
            req.extend_input_len = fill - pre
            row = int(s.req_to_token_pool.alloc([req])[0])
            s.req_to_token_pool.write((row, slice(0, pre)), req.prefix_indices)
            s.req_to_token_pool.write((row, slice(pre, fill)), alloc_token_slots(s.tree_cache, fill - pre))
            req.kv_committed_len = req.kv_allocated_len = fill
            req.output_ids.append(7)
            s.tree_cache.cache_unfinished_req(req)
            s.running_batch.reqs.append(req)
        s.last_batch = None

    def decode_turn(self) -> Any:
        """One decode turn: the release's own ``get_next_batch_to_run`` (no request waits, so it
        decodes), the model's step -- a token each, the finished ones released by SGLang's
        ``release_kv_cache`` -- and the loop's boundary.  The batch it ran (``None``: none)."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        s = self.sched
        batch = s.get_next_batch_to_run()
        if batch is not None:
            s.forward_ct += 1
            for req in batch.reqs:
                req.output_ids.append(9)
                if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                    req.finished_reason = FINISH_LENGTH(len(req.output_ids))
                    release_kv_cache(req, s.tree_cache)
            s.last_batch = batch
        self.loop()  # type: ignore[attr-defined]
        return batch

"""HiCache's tree on a dense rank (``--enable-hierarchical-cache``, the write-through policy, no
storage backend), on an SGLang release's own classes (run in the release's venv).

:func:`hicache_tree` builds the release's own ``HiRadixCache`` (0.5.4.post1 to 0.5.13; from 0.5.17
:mod:`rigs.sglang.hicache_built` builds HiCache with the release's own constructors) over a
rank's KV allocator and rows, with the release's own ``MHATokenToKVPoolHost`` accounting (its KV
buffers not allocated: ``alloc`` / ``free`` / ``available_size`` are the release's) and the
release's own ``HiCacheController`` -- ``write``, ``load``, ``evict_device``, ``evict_host``,
``reset`` -- of which only the copies are stood in for, as SGLang's own unit tests stand in for a
device: ``start_writing`` and ``start_loading`` merge the queued operations with SGLang's own
``CacheOperation.merge_ops`` and hand their node ids to ``ack_write_queue`` / ``ack_load_queue``
with a copy that has already finished (no stream runs), as a copy that completes within a step.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["HOST_RATIO", "hicache_tree"]

HOST_RATIO = 2  # SGLang's default --hicache-ratio: the host pool twice the device's


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


def _started_loading(controller: Any) -> int:
    """``HiCacheController.start_loading`` without the copy: the queued loads merged and
    acknowledged as finished (the host-to-device copy of a prefill that completes within its step).
    The producer's index, as SGLang's returns it (-1: nothing to load)."""
    from sglang.srt.managers.cache_controller import CacheOperation, HiCacheAck

    if not controller.load_queue:
        return -1
    op = CacheOperation.merge_ops(controller.load_queue)
    controller.load_queue.clear()
    controller.ack_load_queue.append(HiCacheAck(_Done(), _Done(), op.node_ids))
    return 0


def _controller(alloc: Any, host: Any) -> Any:
    from sglang.srt.managers.cache_controller import HiCacheController, TransferBuffer

    c = object.__new__(HiCacheController)
    c.mem_pool_device_allocator, c.mem_pool_host, c.mem_pool_device = alloc, host, None
    c.write_policy, c.io_backend, c.page_size, c.enable_storage = "write_through", "direct", 1, False
    c.write_queue, c.load_queue, c.ack_write_queue, c.ack_load_queue = [], [], [], []
    c.stop_event, c.storage_stop_event = threading.Event(), threading.Event()
    c.write_buffer, c.load_buffer = TransferBuffer(c.stop_event), TransferBuffer(c.stop_event)
    c.start_writing = lambda: _started_writing(c)
    c.start_loading = lambda: _started_loading(c)
    return c


def _host_pool(size: int) -> Any:
    from sglang.srt.mem_cache.memory_pool_host import HostKVCache, MHATokenToKVPoolHost

    host = object.__new__(MHATokenToKVPoolHost)
    host.size, host.page_size, host.device, host.lock = size, 1, "cpu", threading.RLock()
    HostKVCache.clear(host)
    return host


def hicache_tree(rank: Any) -> Any:
    """The release's ``HiRadixCache`` over ``rank``'s rows and KV allocator, as its constructor
    sets it up for ``--hicache-write-policy write_through`` with no storage backend (the attributes
    every release from 0.5.4.post1 to 0.5.21 reads; its storage settings through the release's own
    ``_apply_storage_runtime_config`` where it has one)."""
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache
    from sglang.srt.mem_cache.radix_cache import RadixCache

    alloc = rank.token_to_kv_pool_allocator
    tree = object.__new__(HiRadixCache)
    tree._enable_metrics_flag, tree.page_size, tree.kv_cache = False, 1, None
    tree.token_to_kv_pool_host = _host_pool(HOST_RATIO * alloc.size)
    tree.tp_group, tree.tp_world_size, tree.pp_rank, tree.pp_size = None, 1, 0, 1
    tree.attn_tp_group = tree.attn_cp_group = tree.pp_group = None
    tree.metrics_collector = tree.storage_metrics_collector = None
    tree.enable_storage = tree.enable_storage_metrics = False
    tree.extra_metric_labels = None
    tree.prefetch_threshold, tree.prefetch_timeout_base = 256, 1.0
    tree.prefetch_timeout_per_page = 0.25 / 1024
    tree.hicache_storage_pass_prefix_keys = False
    tree.is_prefetch_timeout = tree._prefetch_timeout_check_linear_func
    tree.prefetch_stop_policy = "best_effort"
    tree.load_cache_event = threading.Event()
    tree.cache_controller = _controller(alloc, tree.token_to_kv_pool_host)
    _storage_config(tree)
    tree.ongoing_write_through, tree.ongoing_load_back, tree.ongoing_prefetch = {}, {}, {}
    tree.ongoing_backup, tree.prefetch_loaded_tokens_by_reqid, tree.work_list = {}, {}, []
    tree.write_through_threshold, tree.load_back_threshold = 1, 10
    tree.evictable_host_leaves = set()
    if not rank.release.tree_params:
        RadixCache.__init__(tree, rank.req_to_token_pool, alloc, 1, disable=False)
        return tree
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    params = CacheInitParams(
        disable=False, req_to_token_pool=rank.req_to_token_pool, token_to_kv_pool_allocator=alloc, page_size=1
    )
    RadixCache.__init__(tree, params)
    return tree


def _storage_config(tree: Any) -> None:
    """The release's ``_apply_storage_runtime_config`` with no storage backend, given the keywords
    its signature takes (0.5.12 on: a ``PrefetchTimeoutConfig``); before 0.5.9 there is none."""
    import inspect

    apply = getattr(tree, "_apply_storage_runtime_config", None)
    if apply is None:
        return
    given: dict[str, Any] = {
        "storage_backend": None, "prefetch_threshold": 256, "prefetch_timeout_base": 1.0,
        "prefetch_timeout_per_ki_token": 0.25, "hicache_storage_pass_prefix_keys": False,
        "enable_storage": False, "enable_storage_metrics": False, "extra_metric_labels": None,
    }  # fmt: skip
    takes = inspect.signature(apply).parameters
    if "prefetch_timeout_config" in takes:
        from sglang.srt.mem_cache.hicache_storage import PrefetchTimeoutConfig

        given["prefetch_timeout_config"] = _built(PrefetchTimeoutConfig, base=1.0, per_ki_token=0.25)
    apply(**{k: v for k, v in given.items() if k in takes})


def _built(cls: Any, **values: Any) -> Any:
    """A dataclass of the release with the defaults it declares, ``values`` where it has the field."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})

"""HiCache as the release's own constructors build it (``--enable-hierarchical-cache``, the
write-through policy, no storage backend), on the unified tree releases (0.5.17 on; run in the
release's venv).

:func:`built_hicache_tree` builds a dense model's HiCache tree as the release's tree registry does,
over the rank's rows and a KV allocator whose device pool is the release's ``MHATokenToKVPool`` (one
layer, one head on CPU: :func:`device_kv_pool`), under the published server args: from 0.5.19
(``Release.unified_hicache``) ``UnifiedRadixCache`` with its full-attention component and its own
``init_hicache``, which assembles the release's host pool group (``build_kv_only_stack``: an
``MHATokenToKVPoolHost`` behind a ``HostPoolGroup``) and ``HybridCacheController``; on 0.5.17 - 0.5.18
(whose registry still routes a dense model to it) ``HiRadixCache(params, server_args)``, its own
``MHATokenToKVPoolHost`` and ``HiCacheController``, in a one-rank ``gloo`` world (its constructor
asks the TP group's size).  Stood in for, as SGLang's own unit tests stand in for a device: the host
buffer's page-locking (``cudaHostRegister``: the buffer comes from the release's host allocator,
unregistered) and the copies -- the host pool's device-to-host and host-to-device copy kernels do
nothing, while the controller's streams, events, layer-done counter and acks run as shipped, so a
copy completes within its step.  :func:`unified_load_back` is the unified tree's ``PrefillAdder``
load-back (0.5.17's ``HiRadixCache`` keeps :meth:`rigs.sglang.hicache.HiDecode.load_back`'s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["COPIES", "built_hicache_tree", "device_kv_pool", "unified_load_back"]

# the host pool's copy kernels, by release: 0.5.17 - 0.5.21's, then 0.5.23's (physical indices)
COPIES = (
    "backup_from_device_all_layer",
    "load_to_device_per_layer",
    "backup_from_device_all_layer_physical",
    "load_to_device_per_layer_physical",
)


def device_kv_pool(size: int) -> Any:
    """The release's ``MHATokenToKVPool`` of ``size`` slots: one layer, one head of 8 on CPU (the
    device pool the host pool mirrors and the controller reads its layer count from)."""
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from rigs.sglang.pieces import build

    return build(
        MHATokenToKVPool, size=size, page_size=1, dtype=torch.float16, head_num=1, head_dim=8,
        layer_num=1, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def built_hicache_tree(rank: Any) -> Any:
    """The release's HiCache tree over ``rank``'s rows and KV allocator (built on
    :func:`device_kv_pool`), its host pools' copy kernels stood in for."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    from rigs.sglang.server_args import published

    given: dict[str, Any] = {
        "disable": False,
        "req_to_token_pool": rank.req_to_token_pool,
        "token_to_kv_pool_allocator": rank.token_to_kv_pool_allocator,
        "page_size": 1,
    }
    with _unregistered_host_buffers():
        if rank.release.unified_hicache:
            from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

            params = CacheInitParams(**given, tree_components=(ComponentType.FULL,))
            tree = UnifiedRadixCache(params)
            tree.init_hicache(published(), params)
            hosts = [entry.host_pool for entry in tree.host_pool_group.entry_map.values()]
        else:
            from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

            _one_rank_world()
            tree = HiRadixCache(CacheInitParams(**given), published())
            hosts = [tree.token_to_kv_pool_host]
    for host in hosts:
        for name in COPIES:
            if hasattr(host, name):
                setattr(host, name, _no_copy)
    return tree


def _one_rank_world() -> None:
    """A single-process ``gloo`` world (an in-memory store, no network): a one-GPU server's TP group."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.HashStore()  # type: ignore[attr-defined]  # (torch exports it untyped)
        dist.init_process_group("gloo", rank=0, world_size=1, store=store)


def _no_copy(*_: Any, **__: Any) -> None:
    """A copy kernel with no device to copy from or to."""


def _allocated(
    dims: tuple[int, ...], dtype: Any, device: str, pin_memory: bool, allocator: Any, **_: Any
) -> Any:
    """The host buffer from the release's own host allocator, not page-locked (no CUDA here)."""
    return allocator.allocate(dims, dtype=dtype, device=device)


@contextlib.contextmanager
def _unregistered_host_buffers() -> Iterator[None]:
    """The release's host-buffer allocation for a CPU device pool without ``cudaHostRegister``."""
    from sglang.srt.mem_cache.pool_host import common

    funcs = common.ALLOC_MEMORY_FUNCS
    before = funcs.get("cpu")
    funcs["cpu"] = _allocated
    try:
        yield
    finally:
        if before is None:
            del funcs["cpu"]
        else:
            funcs["cpu"] = before


def unified_load_back(d: Any, req: Any) -> int:
    """The ``PrefillAdder``'s HiCache step on the unified tree, for a new request after its match
    (``d``: the :class:`~rigs.sglang.driver.Driver`): where the match ends on host
    (``needs_host_load_back``), under the adder's lock of the matched device node -- and on 0.5.23
    its host lock of the best match -- the room for the load and the prompt (0.5.23's
    ``prepare_load_back`` reclaims it), the release's own ``init_load_back``, the request's prefix
    grown by what it loaded (0.5.19: ``prefix_indices``; 0.5.23: ``prefix_len``) and protected
    (``req.kv.cache_protected_len``), then the batch's ``ready_to_load_host_cache``.  The slots
    loaded back (0: none)."""
    from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

    tree = d.sched.tree_cache
    if not req.needs_host_load_back():
        return 0
    params = InitLoadBackParams(
        best_match_node=req.best_match_node, host_hit_length=req.host_hit_length, req=req
    )
    room = req.host_hit_length + len(req.origin_input_ids) + 8  # the load and the prompt
    with _locked(d, tree, req.last_node), _host_locked(d, tree, req.best_match_node, room):
        got, req.last_node = tree.init_load_back(params)
    if d.release.tree_lock:
        loaded = req.host_loaded_length = int(got)
        req.prefix_len += loaded
        if tree.load_back_is_cache_owned():
            req.kv.cache_protected_len = req.prefix_len
    else:
        import torch

        loaded = len(got)
        req.prefix_indices = torch.cat([req.prefix_indices, got])
        req.kv.cache_protected_len = len(req.prefix_indices)
    tree.ready_to_load_host_cache()
    d._room(len(req.origin_input_ids) + len(req.output_ids) + 8)  # prepare_for_extend's, after the load
    return loaded


@contextlib.contextmanager
def _locked(d: Any, tree: Any, node: Any) -> Iterator[None]:
    """The adder's ``_lock_node``: 0.5.23's ``lock`` / ``unlock``, 0.5.19's ``inc_lock_ref`` and the
    ``dec_lock_ref`` of what it locked."""
    if d.release.tree_lock:
        lock = tree.lock(node)
        try:
            yield
        finally:
            tree.unlock(lock)
        return
    params = tree.inc_lock_ref(node).to_dec_params()
    try:
        yield
    finally:
        tree.dec_lock_ref(node, params)


@contextlib.contextmanager
def _host_locked(d: Any, tree: Any, node: Any, room: int) -> Iterator[None]:
    """0.5.23's host lock and lock of the best match, under which its ``prepare_load_back``
    reclaims the room for the load and the prompt (nothing on 0.5.19, whose ``load_back`` takes
    its own locks and slots)."""
    if not d.release.tree_lock:
        yield
        return
    params = tree.inc_host_lock_ref(node).to_dec_params()
    try:
        with _locked(d, tree, node):
            d._room(room)
            yield
    finally:
        tree.dec_host_lock_ref(node, params)

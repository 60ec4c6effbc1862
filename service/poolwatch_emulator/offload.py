"""The PD decode side's KV offload (``--disaggregation-decode-enable-offload-kvcache``,
``disaggregation/decode_kvcache_offload_manager.py``), as 0.5.4.post1 runs it.

A decode request that finishes is not released at once: ``offload_kv_cache`` queues a device ->
host copy of its page-aligned KV and parks it in ``ongoing_offload``, holding its KV and row; the
next decode loop's ``check_offload_progress`` sees the copy's ack, releases the request through
``tree_cache.cache_finished_req`` (which also takes its prebuilt KV off ``ChunkCache``'s
``protected_size_``) and hands the host copy to storage (``ongoing_backup``), whose completion
frees the host slots.  The host copy completes at once; storage at the next check.

``decode-offload-protected-drift`` (S12, PR #12774) is 0.5.4.post3 - 0.5.5.post2's
``_release_finished_req``: it frees the request's KV and row by hand and leaves
``protected_size_`` as it was (those releases also free the prompt's pages early, at the offload;
the emulator frees everything at the ack: the same ids, one step later).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from poolwatch_emulator.caches import row_slots
from poolwatch_emulator.hicache import HiCacheController, HostKVCache
from poolwatch_emulator.ownership import free_row

if TYPE_CHECKING:
    import torch

    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req import Req

__all__ = ["DecodeKVCacheOffloadManager"]


class DecodeKVCacheOffloadManager:
    """Finished decode requests' KV copied to host memory, then released; then to storage."""

    def __init__(self, tree_cache: Any, host_tokens: int, faults: FaultPlan, clock: Callable[[], float]):
        self.tree_cache = tree_cache
        self.req_to_token_pool = tree_cache.req_to_token_pool
        self.token_to_kv_pool_allocator = tree_cache.token_to_kv_pool_allocator
        self.page_size: int = tree_cache.page_size
        self.faults = faults
        self.clock = clock
        self.decode_host_mem_pool = HostKVCache(host_tokens, self.page_size)
        self.cache_controller = HiCacheController(self.decode_host_mem_pool)
        self.request_counter = 0
        self.ongoing_offload: dict[int, tuple[Req, torch.Tensor, list[int], float]] = {}
        self.ongoing_backup: dict[int, tuple[str, torch.Tensor, float]] = {}
        self.emu_storage_acks: list[int] = []  # the backups' completions, seen at the next check

    def offload_kv_cache(self, req: Req) -> bool:
        """Queue a finished request's page-aligned KV for the host; False: release it now."""
        if req.req_pool_idx is None:
            return False
        tokens = req.origin_input_ids + req.output_ids
        aligned_len = len(tokens) // self.page_size * self.page_size
        aligned_len = min(aligned_len, req.kv_committed_len)
        if aligned_len == 0:
            return False
        self.request_counter += 1
        ack_id = self.request_counter
        indices = row_slots(self.req_to_token_pool, req, aligned_len)
        host_indices = self.cache_controller.write(indices, ack_id)
        if host_indices is None:
            return False  # "Not enough host memory for request ..."
        self.ongoing_offload[ack_id] = (req, host_indices, tokens[:aligned_len], self.clock())
        return True

    def check_offload_progress(self) -> None:
        n_write, n_backup = len(self.cache_controller.ack_write_queue), len(self.emu_storage_acks)
        self._check_offload_progress(n_write)
        self._check_backup_progress(n_backup)

    def _check_offload_progress(self, finish_count: int) -> None:
        while finish_count > 0:
            _, finish_event, ack_list = self.cache_controller.ack_write_queue.pop(0)
            finish_event.synchronize()
            for ack_id in ack_list:
                req, host_indices, _, start_time = self.ongoing_offload.pop(ack_id)
                if self.faults.fires("decode-offload-protected-drift"):
                    self._release_finished_req(req)
                else:
                    self.tree_cache.cache_finished_req(req)
                self._trigger_backup(req.rid, host_indices, start_time)
            finish_count -= 1

    def _release_finished_req(self, req: Req) -> None:
        """0.5.4.post3 - 0.5.5.post2: the KV and the row by hand, ``protected_size_`` untouched."""
        self.token_to_kv_pool_allocator.free(row_slots(self.req_to_token_pool, req, req.kv_committed_len))
        free_row(self.req_to_token_pool, req, free_mamba=True)
        req.kv_committed_freed = req.kv_overallocated_freed = True

    def _trigger_backup(self, rid: str, host_indices: torch.Tensor, start_time: float) -> None:
        self.request_counter += 1
        self.ongoing_backup[self.request_counter] = (rid, host_indices, start_time)
        self.emu_storage_acks.append(self.request_counter)

    def _check_backup_progress(self, finish_count: int) -> None:
        for _ in range(finish_count):
            _, host_indices, _ = self.ongoing_backup.pop(self.emu_storage_acks.pop(0))
            self.decode_host_mem_pool.free(host_indices)

"""The PD decode side and its KV offload, on an SGLang release's own classes (run in its venv), on
a dense rank (:mod:`rigs.sglang.dense`).

:class:`Offload` drives the decode side of a PD transfer through the release's own code:
``DecodePreallocQueue._pre_alloc`` (where the transfer lands), ``process_prebuilt`` (the request
joins the running batch), and the ``DecodeKVCacheOffloadManager`` of
``--disaggregation-decode-enable-offload-kvcache`` (a request's KV copied to host -- at every
decode step from 0.5.10, at its finish before -- then released), or without it the release's own
release of a finished request.  What is stood in for: the KV transfer (none runs: the
slots are allocated where it lands), and the device-to-host copy engine and host pool (a write
completes when the flow says so: :meth:`Offload.offload_done`).
"""

from __future__ import annotations

import itertools
import queue
import weakref
from types import SimpleNamespace
from typing import Any

from rigs.sglang.releases import Release

__all__ = ["Offload"]


class _Written:
    """A finished device-to-host copy, as the copy engine acknowledges it."""

    def synchronize(self) -> None:
        return None


class _Ack(tuple[Any, ...]):
    """An acknowledged write: ``(None, event, node ids)`` up to 0.5.19, an object with ``node_ids``
    and ``finish_event`` later -- one value that reads as both."""

    node_ids: list[int]
    finish_event: _Written

    def __new__(cls, node_ids: list[int]) -> _Ack:
        ack = super().__new__(cls, (None, _Written(), node_ids))
        ack.node_ids, ack.finish_event = node_ids, ack[1]
        return ack


class _CopyEngine:
    """HiCache's device-to-host controller: a write is handed host ids, and is acknowledged when
    :meth:`finish` says the copy is done; a backup to storage is never acknowledged (none runs)."""

    def __init__(self) -> None:
        self.ack_write_queue: list[Any] = []
        self.ack_backup_queue: queue.Queue[Any] = queue.Queue()
        self._pending: list[int] = []
        self._host = itertools.count()
        self._ids = itertools.count(1)

    def write(self, device_indices: Any, node_id: int, **_: Any) -> Any:
        import torch

        self._pending.append(node_id)
        return torch.tensor([next(self._host) for _ in range(len(device_indices))])

    def finish(self) -> None:
        if self._pending:
            self.ack_write_queue.append(_Ack(list(self._pending)))
            self._pending.clear()

    def write_storage(self, host_indices: Any, tokens: Any, hash_value: Any = None, **_: Any) -> int:
        return next(self._ids)

    def get_hash_str(self, tokens: Any, prior: Any = "", **_: Any) -> str:
        return f"{prior}/{len(tokens)}"


class Offload:
    """The decode-side steps of a :class:`~rigs.sglang.driver.Driver` on a dense decode rank."""

    release: Release
    sched: Any

    def open_offload(self) -> Any:
        """The release's own ``DecodeKVCacheOffloadManager`` over the rank (its copy engine and
        host pool stood in for), and its ``DecodePreallocQueue``'s pre-allocation."""
        from sglang.srt.disaggregation.decode_kvcache_offload_manager import DecodeKVCacheOffloadManager

        s = self.sched
        self.open_decode()
        m = DecodeKVCacheOffloadManager.__new__(DecodeKVCacheOffloadManager)
        m.req_to_token_pool, m.token_to_kv_pool_allocator = s.req_to_token_pool, s.token_to_kv_pool_allocator
        m.page_size, m.server_args, m.request_counter, m.tree_cache = 1, s.server_args, 0, s.tree_cache
        m.decode_host_mem_pool = SimpleNamespace(free=lambda idx: None)
        m.cache_controller, m.tp_group, m.tp_world_size = _CopyEngine(), None, 1
        m.ongoing_offload, m.ongoing_backup, m.offloaded_state = {}, {}, {}
        m.offload_stride = 1  # (0.5.10+ offload a decoding request's KV in strides of this many tokens)
        m.offload_inflight = {}  # (0.5.13: the offloads in flight, by request id)
        if self.release.decode_radix:  # per-request offload state, the incremental offload's stride
            m.offloaded_state, m.offload_inflight = weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary()
            m.kv_cache = s.token_to_kv_pool_allocator.get_kvcache()
        s.decode_offload_manager = m
        return m

    def open_decode(self) -> None:
        """The decode side without the offload (finished requests released by the release's own
        path): its ``DecodePreallocQueue``'s pre-allocation and the transfer queue."""
        from sglang.srt.disaggregation.decode import DecodePreallocQueue

        from rigs.sglang.server_args import published

        s = self.sched
        s.server_args = published()
        s.decode_offload_manager = None  # (as SGLang's scheduler sets it with the offload off)
        prealloc = DecodePreallocQueue.__new__(DecodePreallocQueue)
        prealloc.req_to_token_pool, prealloc.token_to_kv_pool_allocator = (
            s.req_to_token_pool,
            s.token_to_kv_pool_allocator,
        )
        prealloc.tree_cache, prealloc.scheduler, prealloc.token_to_kv_pool = s.tree_cache, s, None
        prealloc.queue, prealloc.retracted_queue, prealloc.pending_reqs = [], [], []  # as its __init__
        s.enable_decode_hicache, s.sliding_window_size = False, None
        s.tp_worker.is_hybrid_swa = False
        s.disagg_decode_prealloc_queue = prealloc
        s.disagg_decode_transfer_queue = SimpleNamespace(queue=[])  # DecodeRequest(req=...) entries

    def transferred(self, req: Any) -> None:
        """The PD transfer starts: SGLang's own ``_pre_alloc`` takes the request's row and the KV
        the transfer writes into; the request waits on the transfer queue."""
        queue = self.sched.disagg_decode_prealloc_queue
        if self.release.decode_radix:  # the decode rank's own tree: the match, locked
            match = queue._match_prefix_and_lock(req)
            queue._pre_alloc(req, match.prefix_indices, match.l1_prefix_len, match.decode_prefix_len)
            req.kv.cache_protected_len = match.decode_prefix_len
        else:
            queue._pre_alloc(req)
        self.sched.disagg_decode_transfer_queue.queue.append(SimpleNamespace(req=req))

    def prebuilt(self, reqs: list[Any]) -> None:
        """SGLang's own ``process_prebuilt``: the transferred requests join the running batch."""
        from sglang.srt.disaggregation.decode_schedule_batch_mixin import (
            ScheduleBatchDisaggregationDecodeMixin,
        )
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        s = self.sched
        done = {id(r) for r in reqs}
        s.disagg_decode_transfer_queue.queue = [
            e for e in s.disagg_decode_transfer_queue.queue if id(e.req) not in done
        ]
        batch = SimpleNamespace(
            reqs=reqs, tree_cache=s.tree_cache, device="cpu", spec_algorithm=SpeculativeAlgorithm.NONE,
            token_to_kv_pool_allocator=s.token_to_kv_pool_allocator,
        )  # fmt: skip
        if self.release.decode_radix:  # (the overlap scheduler's future map: nothing is stashed)
            import torch

            batch.req_pool_indices = torch.tensor([r.kv.req_pool_idx for r in reqs])
            ScheduleBatchDisaggregationDecodeMixin.process_prebuilt(
                batch, SimpleNamespace(stash=lambda *a, **k: None)
            )
        else:  # (0.5.4.post1 names it process_prebuilt_extend; 0.5.13 stashes the last token)
            import torch

            mixin = ScheduleBatchDisaggregationDecodeMixin
            own = getattr(mixin, "process_prebuilt", None) or mixin.process_prebuilt_extend
            batch.req_pool_indices = torch.tensor([self.record(r).req_pool_idx for r in reqs])  # type: ignore[attr-defined]
            args = () if self.release.kv_lens == "req.kv" else (s.server_args,)  # (0.5.19: no server args)
            own(batch, *args, SimpleNamespace(stash=lambda *a, **k: None))
        s.running_batch.reqs.extend(reqs)

    def decode_one(self, req: Any) -> bool:
        """One decode step of ``req``: the input token's KV slot, the sample; a finished request is
        handed to the offload manager (the release's ``offload_kv_cache``).  True: it finished."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH

        s, held = self.sched, self.record(req)  # type: ignore[attr-defined]
        pos = self.allocated(req)  # type: ignore[attr-defined]
        s.req_to_token_pool.write(
            (held.req_pool_idx, slice(pos, pos + 1)), s.token_to_kv_pool_allocator.alloc(1)
        )
        self._grown(req, pos + 1)  # type: ignore[attr-defined]
        req.output_ids.append(9)
        if len(req.output_ids) >= req.sampling_params.max_new_tokens:  # the length stop
            req.finished_reason = FINISH_LENGTH(len(req.output_ids))
        m = s.decode_offload_manager
        if m is None:  # no offload: the release's own release of a finished request
            if req.finished():
                self.release_req(req)  # type: ignore[attr-defined]
            return bool(req.finished())
        if not req.finished():
            if self.release.offload_decoding:  # the incremental offload while it decodes
                m.offload_kv_cache(req)
            return False
        s.running_batch.reqs.remove(req)
        if not m.offload_kv_cache(req) and self.release.offload_decoding:
            m.finalize_release_on_finish(req)
        return True

    def offload_done(self) -> None:
        """The device-to-host copies finish; SGLang's own ``check_offload_progress`` releases the
        requests whose copy is done (nothing without the offload)."""
        m = self.sched.decode_offload_manager
        if m is None:
            return
        m.cache_controller.finish()
        m.check_offload_progress()

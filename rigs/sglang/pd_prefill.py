"""A PD prefill rank's overlap loop around SGLang's own result path (run in the release's venv).

The release's ``SchedulerDisaggregationPrefillMixin`` and ``Scheduler`` methods run unmodified, in
the order of its ``event_loop_overlap_disagg_prefill``: a turn receives (aborts reach
``abort_request``), releases a deferred chunked abort (``process_pending_chunked_abort``), resolves
the waiting queue's bootstrap, ends the previous chunk (``process_prefill_chunk``: the chunk to the
tree, the bootstrap check, an optimistic request's yield), launches the next batch, then processes
the *previous* batch's result (``process_batch_result_disagg_prefill``) and polls the inflight queue.
A request arrives bootstrapped, or optimistically (its decode side still bootstrapping: the chunk
step's bootstrap check, the yield and the requeue are the release's own).
What is stood in for is what SGLang's own CPU tests of this path stand in for: the forward (a
result of one sampled token per request), the cross-rank poll reduction (each sender's own poll),
the KV sender (:class:`~rigs.sglang.pd_standins.Sender`, scripted: it reports what the test says
the decode side did), the
bootstrap queue's hand-over, and the batch builder, which here allocates a request's next chunk --
its row and Mamba slot first, then the chunk's KV -- as ``prepare_for_extend`` does.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rigs.sglang.driver import Driver
from rigs.sglang.pd_standins import Sender, Tokenizer, launched, poll_each_sender
from rigs.sglang.pieces import Batch

__all__ = ["PrefillLoop"]

# the release's own methods the loop runs, where the release has them (bound on the rank's class)
_PREFILL = (
    "process_batch_result_disagg_prefill",
    "check_bootstrap",
    "handle_pending_bootstrap",
    "handle_bootstrap_failure",
    "has_bootstrapped_waiting_req",
    "clear_pending_chunk_send",
    "optimistic_release_and_requeue",
    "process_disagg_prefill_inflight_queue",
    "handle_inflight_transfer_failure",
    "resolve_waiting_queue_bootstrap",
    "_retire_aborted_prefill_result",  # 0.5.20: the fix
)
_SCHEDULER = ("process_pending_chunked_abort", "collect_inflight_reqs", "_release_aborted_request")


def _bind(cls: type) -> None:
    """The release's own methods on the rank's class (those the class has -- the probe's wrapped
    ``process_prefill_chunk`` among them -- stay)."""
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.managers.scheduler import Scheduler

    for owner, names in ((SchedulerDisaggregationPrefillMixin, _PREFILL), (Scheduler, _SCHEDULER)):
        for name in names:
            if hasattr(owner, name) and name not in cls.__dict__:
                setattr(cls, name, getattr(owner, name))


class PrefillLoop:
    """``d``'s PD prefill rank (made with :meth:`Driver.new` in mode ``prefill``) turning as the
    release's overlap loop turns, ``chunk`` tokens a prefill chunk; ``radix=False``: the rank runs
    with ``--disable-radix-cache`` (SGLang's ``ChunkCache`` over the same pools, the Mamba slot freed
    with the request)."""

    pp_size = 1

    def __init__(self, d: Driver, chunk: int, *, radix: bool = True) -> None:
        from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator

        self.d, self.chunk = d, chunk
        self.arrived: list[Any] = []
        s = self.sched = d.sched
        _bind(type(s))
        if not radix:
            s.tree_cache = _chunk_cache(s)
        d.open_admission()  # abort_request's queues and its reply to the tokenizer
        s.enable_overlap, s.result_queue = True, []
        s.disagg_prefill_pending_chunk_rids = set()
        s.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(s.req_to_token_pool.size)
        s.disagg_prefill_bootstrap_queue = SimpleNamespace(queue=[], finalize_bootstrap=_finalized)
        s.ipc_channels = SimpleNamespace(send_to_tokenizer=Tokenizer())
        s.output_streamer = SimpleNamespace(stream_output=lambda *_, **__: None)
        s.batch_result_processor = SimpleNamespace(
            snapshot_auxiliary_output_starts=lambda *_: None, move_logprobs_to_cpu=lambda **_: None
        )
        s.metrics_reporter = SimpleNamespace(enable_metrics=False, report_prefill_stats=lambda **_: None)
        s.spec_algorithm = SimpleNamespace(is_eagle=lambda: False)
        s.ps = SimpleNamespace(pp_size=self.pp_size, tp_rank=0, pp_rank=0)
        s.attn_cp_cpu_group = s.attn_tp_cpu_group = s.mm_receiver = s.scheduler_stage_metrics = None
        s.beam_coordinator = SimpleNamespace(retire_group=lambda _: None)
        s.maybe_send_health_check_signal = lambda: None
        s._pending_chunked_abort_req = None
        s.processed_tokens_counter = 0  # (0.5.20: a requeued request's arrival mark)
        poll_each_sender()

    def arrive(self, rid: str, tokens: int, *, optimistic: bool = False) -> Any:
        """A request popped from the bootstrap queue into the waiting queue, its metadata buffer
        taken: bootstrapped, or (``optimistic``: SGLang's optimistic prefill, where the release's
        flags leave it on) popped while its decode side is still bootstrapping, its first attempt."""
        from sglang.srt.disaggregation.base import KVPoll

        first = 1000 * (len(self.arrived) + 1)  # no two requests share a prefix
        req = self.d.arrive(rid, list(range(first, first + tokens)))
        self.arrived.append(req)
        req.bootstrap_host, req.bootstrap_room = "decode", len(self.arrived)
        req.disagg_kv_sender = Sender(KVPoll.Bootstrapping if optimistic else KVPoll.WaitingForInput)
        req.metadata_buffer_index = self.sched.req_to_metadata_buffer_idx_allocator.alloc()
        req.pending_bootstrap = optimistic
        if optimistic:
            req.prefill_attempt_count += 1  # as pop_bootstrapped counts it
        self.sched.waiting_queue.append(req)
        return req

    def turn(self, *aborts: str) -> None:
        """One turn of ``event_loop_overlap_disagg_prefill`` (``aborts``: the rids an ``AbortReq``
        names, received at its head)."""
        from sglang.srt.managers.io_struct import AbortReq

        s = self.sched
        self.d.loop()  # the loop's first call: the probe looks before it
        for rid in aborts:
            s.abort_request(AbortReq(rid=rid))
        s.process_pending_chunked_abort()
        s.running_batch.batch_is_full = False
        s.resolve_waiting_queue_bootstrap()
        s.process_prefill_chunk(last_batch=s.last_batch, running_batch=s.running_batch)
        batch = self._next_batch()
        if batch is not None:
            s.result_queue.append(launched(batch))
        if s.last_batch is not None:  # the previous batch's result, a turn late
            done, result = s.result_queue.pop(0)
            s.process_batch_result_disagg_prefill(done, result)
        s.process_disagg_prefill_inflight_queue()
        s.last_batch = batch

    def busy(self) -> bool:
        """Anything still in flight or queued (SGLang's idle check waits for none)."""
        s = self.sched
        return bool(s.last_batch or s.result_queue or s.chunked_req or s.disagg_prefill_inflight_queue)

    def pending(self) -> list[Any]:
        """The requests of the batches whose results are still to be processed."""
        return [r for b, _ in self.sched.result_queue for r in b.reqs]

    def _next_batch(self) -> Batch | None:
        """The batch builder's pick: the chunked request's next chunk, else the first waiting
        request that is not aborted."""
        from sglang.srt.disaggregation.utils import is_aborted

        s = self.sched
        req = s.chunked_req
        if req is None:
            ready = [r for r in s.waiting_queue if not is_aborted(r)]
            if not ready:
                return None
            req = ready[0]
            s.waiting_queue.remove(req)
        self._allocate(req)
        return Batch([req], _extend())

    def _allocate(self, req: Any) -> None:
        """The adder and ``prepare_for_extend`` for one request: a new one's match (locked), row and
        Mamba slot, then the chunk's KV; the request stays ``chunked_req`` while its prompt is not done."""
        s, record = self.sched, self.d.record(req)
        pool, alloc = s.req_to_token_pool, s.token_to_kv_pool_allocator
        if not record.holds_kv:
            req.init_next_round_input(s.tree_cache)
            s.tree_cache.inc_lock_ref(req.last_node)  # the adder locks the match
            req.skip_lock_node_ids = {}
            pool.alloc([req])
            start = len(req.prefix_indices)
            pool.write((record.req_pool_idx, slice(0, start)), req.prefix_indices)
        else:
            start = record.kv_allocated_len
        upto = min(start + self.chunk, len(req.origin_input_ids))
        pool.write((record.req_pool_idx, slice(start, upto)), alloc.alloc(upto - start))
        record.kv_allocated_len = record.kv_committed_len = upto
        req.set_extend_range(start, upto)
        s.chunked_req = req if upto < len(req.origin_input_ids) else None
        if s.chunked_req is not None:
            req.inflight_middle_chunks += 1


def _chunk_cache(s: Any) -> Any:
    """SGLang's tree with ``--disable-radix-cache``: its ``ChunkCache`` over the rank's pools."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache

    pool, alloc = s.req_to_token_pool, s.token_to_kv_pool_allocator
    return ChunkCache(
        CacheInitParams(disable=True, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc, page_size=1)
    )


def _finalized(req: Any) -> bool:
    """The bootstrap queue's hand-over of a bootstrapped request (its sender's init)."""
    req.pending_bootstrap = False
    return True


def _extend() -> Any:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.EXTEND

"""HiCache's turns on a dense rank (``--enable-hierarchical-cache``, the write-through policy; the
tree: :func:`rigs.sglang.hicache_tree.hicache_tree`, from 0.5.17 :mod:`rigs.sglang.hicache_built`),
run in the release's venv.

:class:`HiDecode` gives a :class:`~rigs.sglang.driver.Driver` what the release's scheduler does
for HiCache: the prefill batch builder's ``check_hicache_events`` (acknowledged write-throughs
unlocked, finished load-backs unlocked), the ``PrefillAdder``'s load-back of a prefix whose tail
lives only on host (``init_load_back`` under the adder's lock, then ``ready_to_load_host_cache``),
and the decode turns through the release's own ``get_next_batch_to_run`` (the prefill builder,
``update_running_batch`` and its ``check_decode_mem`` / ``retract_decode``); what is stood in for
is the model: a prompt's forward (the row, the KV, a first token), a decode step's (a slot per
request, a token), and the request finishing at its length, released by SGLang's own
``release_kv_cache``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from rigs.sglang.hicache_tree import hicache_tree
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


def decode_methods() -> dict[str, Any]:
    """The release's own :data:`DECODE_METHODS` (where it has them), to bind on its rank class."""
    from sglang.srt.managers.scheduler import Scheduler

    return {name: getattr(Scheduler, name) for name in DECODE_METHODS if hasattr(Scheduler, name)}


@functools.cache
def _decode_batch() -> type[_DecodeBatch]:
    """The running batch: :class:`~rigs.sglang.pieces.Batch` with SGLang's own ``check_decode_mem``,
    ``retract_decode`` and ``release_req`` (a retraction), the model's step stood in for."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    names = ("check_decode_mem", "new_tokens_required_next_decode", "retract_decode", "release_req")
    own = {n: getattr(ScheduleBatch, n) for n in names if hasattr(ScheduleBatch, n)}  # (where it has them)
    return type("DecodeBatch", (_DecodeBatch,), own)


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

    # -- the prefill builder's HiCache steps (a Driver's own prefill turns: rigs.sglang.steps) ----

    def hicache_events(self) -> None:
        """``check_hicache_events``, where the release's prefill builder calls it: finished
        write-throughs and load-backs unlocked (the copies are done: :mod:`rigs.sglang.hicache_tree`)."""
        self.sched.tree_cache.check_hicache_events()

    def load_back(self, req: Any) -> None:
        """The ``PrefillAdder``'s HiCache step for a new request, after its prefix match: where the
        matched prefix ends on host, the release's own ``init_load_back`` (under the adder's lock of
        the device part) gives the host part device slots, the request's prefix grows by them and
        its last node moves down; the batch then starts the load (``ready_to_load_host_cache``).
        Nothing without HiCache (:meth:`open_hicache`) or a host hit."""
        s = self.sched
        if not getattr(s, "enable_hierarchical_cache", False):
            return
        if self.release.unified_hicache:  # the unified tree's (0.5.19 on)
            from rigs.sglang.hicache_built import unified_load_back

            s.loaded_back = getattr(s, "loaded_back", 0) + unified_load_back(self, req)
            return
        if req.host_hit_length <= 0:
            return
        import torch

        tree, locked = s.tree_cache, req.last_node
        tree.inc_lock_ref(locked)
        try:
            new, req.last_node = tree.init_load_back(*_load_back_args(tree, req))
        finally:
            tree.dec_lock_ref(locked)
        req.prefix_indices = torch.cat([req.prefix_indices, new])
        setattr(req, _protected_len(), len(req.prefix_indices))  # what the tree owns of its row
        s.loaded_back = getattr(s, "loaded_back", 0) + len(new)  # (the workload's figures)
        tree.ready_to_load_host_cache()
        # prepare_for_extend's alloc_token_slots evicts for the new tokens after the load took its
        # slots (the loaded node is locked by the load)
        self._room(len(req.origin_input_ids) + len(req.output_ids) + 8)  # type: ignore[attr-defined]


@functools.cache
def _protected_len() -> str:
    """The ``Req`` field the release's adder sets to the prefix length after a load-back (the part
    of the row the tree owns, which ``cache_finished_req`` does not free): ``cache_protected_len``
    from 0.5.6, ``last_matched_prefix_len`` before (read in its own ``add_one_req``)."""
    from sglang.srt.managers.schedule_policy import PrefillAdder

    source = inspect.getsource(PrefillAdder.add_one_req)
    new = "req.cache_protected_len = prefix_len" in source
    return "cache_protected_len" if new else "last_matched_prefix_len"


def _load_back_args(tree: Any, req: Any) -> tuple[Any, ...]:
    """``init_load_back``'s arguments in the release's API: ``(last_host_node, host_hit_length)``,
    or an ``InitLoadBackParams`` (0.5.10: of the request's last host node; 0.5.13: of its best
    match node), with the fields the release's dataclass has."""
    if "params" not in inspect.signature(tree.init_load_back).parameters:
        return req.last_host_node, req.host_hit_length
    import dataclasses

    from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

    fields = {f.name for f in dataclasses.fields(InitLoadBackParams)}
    node = "best_match_node" if "best_match_node" in fields else "last_host_node"
    return (InitLoadBackParams(**{node: getattr(req, node)}, host_hit_length=req.host_hit_length, req=req),)

"""Speculative decoding's KV books on an SGLang release's own classes (spec v2 with EAGLE; run in the
release's venv).  Where a release's decode tops a request up is its row's ``spec``
(:class:`~rigs.sglang.releases.SpecPath`): ``EagleDraftInput.prepare_for_decode`` over the draft
input's ``allocate_lens`` (0.5.5.post3: to ``seq_lens + ALLOC_LEN_PER_DECODE``) or over the
request's ``kv_allocated_len`` (0.5.6 - 0.5.13: to ``kv_committed_len + 2 *
get_alloc_len_per_decode``, an unaligned length at page > 1, the tail PR #31616 calls stranded), or
from 0.5.17 the dispatcher ``spec_prepare_for_decode`` -> ``eagle_prepare_for_decode`` ->
``mem_cache.allocation.alloc_for_spec_decode`` over ``req.kv`` (the same reserve, rounded up to the
page end).

:func:`paged_pools` gives a scheduler-shaped object the release's ``ReqToTokenPool``, KV allocator
(paged at page > 1) and the tree ``--disable-radix-cache`` builds (``ChunkCache``; 0.5.23 a disabled
``UnifiedRadixCache``); :func:`prefilled` makes a real ``Req`` whose prompt's KV is allocated and
recorded as ``prepare_for_extend`` records it; :func:`spec_step` runs the release's own decode
preparation for a batch and then commits 1 - 4 accepted tokens per request, as spec v2's verify and
resolve do; :func:`release` is the release's ``release_kv_cache``.  ``aligned`` applies PR #31616's
idea where the release lacks it (``kv_allocated_len`` rounded up to the page end: the allocator
hands out the same whole pages, and the row records their slots).  What is stood in for: the model
(the acceptance is drawn), and two Triton kernels (:mod:`rigs.sglang.spec_kernels`).
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from rigs.sglang.releases import Release, ServerArgs, SpecPath
from rigs.sglang.server_args import DENSE, publish_server_args, published
from rigs.sglang.spec_kernels import stand_in_kernels

__all__ = ["SPEC", "allocated", "paged_pools", "prefilled", "release", "spec_step"]

# EAGLE as the entries run it: 3 draft steps, topk 1, 4 draft tokens (alloc_len_per_decode 4)
NUM_STEPS, TOPK, DRAFT_TOKENS = 3, 1, 4
SPEC = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": NUM_STEPS,
    "speculative_eagle_topk": TOPK,
    "speculative_num_draft_tokens": DRAFT_TOKENS,
    "attention_backend": "torch_native",  # get_last_loc's torch path
}


def _record(rel: Release, req: Any) -> Any:
    """What holds the request's row and committed length: the request, or its ``req.kv``."""
    return req.kv if rel.kv_lens == "req.kv" else req


def allocated(rel: Release, req: Any) -> int:
    """The request's ``kv_allocated_len`` where the release keeps it (0.5.17: in ``req.kv`` alone)."""
    return int((req.kv if rel.unified_tree else req).kv_allocated_len)


def _worker_constant() -> None:
    """What the EAGLE v2 worker's constructor sets: ``EagleDraftInput.ALLOC_LEN_PER_DECODE``, the
    per-decode length 0.5.5.post3 - 0.5.6's ``prepare_for_decode`` reads (from 0.5.9 it asks
    ``get_alloc_len_per_decode``, which reads the server args)."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    EagleDraftInput.ALLOC_LEN_PER_DECODE = max(NUM_STEPS * TOPK, DRAFT_TOKENS)


def paged_pools(rank: Any, rel: Release, *, pages: int, page: int, rows: int, width: int) -> None:
    """The release's rows, KV allocator (paged where ``page`` > 1) and chunk tree on ``rank``, EAGLE on."""
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    dense = {"model_path": str(DENSE)} if rel.server_args is ServerArgs.RESOLVED else {}  # (a dense model)
    if publish_server_args(rel, page_size=page, **SPEC, **dense):
        rank.server_args = published()  # the spec rank's (the census's reach past a request's KV)
    paged = stand_in_kernels(page)
    if rel.spec is not SpecPath.ALLOCATION:
        _worker_constant()
    rank.req_to_token_pool = ReqToTokenPool(rows, width, "cpu", False)
    rank.token_to_kv_pool_allocator = (  # SGLang's own choice: the plain allocator at page 1
        paged.PagedTokenToKVPoolAllocator(pages * page, page, torch.float16, "cpu", None, need_sort=False)
        if page > 1
        else TokenToKVPoolAllocator(pages, torch.float16, "cpu", None, need_sort=False)
    )
    rank.tree_cache = _chunk_tree(rank, rel, page)
    rank.page_size, rank.cache_params = page, None  # (a plain model: no Mamba pool)


def _chunk_tree(rank: Any, rel: Release, page: int) -> Any:
    """The tree of ``--disable-radix-cache`` as the scheduler builds it with EAGLE on (``is_eagle``):
    ``ChunkCache``, or (0.5.23) the unified tree, disabled, over the full KV alone."""
    pools = {
        "req_to_token_pool": rank.req_to_token_pool,
        "token_to_kv_pool_allocator": rank.token_to_kv_pool_allocator,
    }
    if not rel.tree_params:  # (up to 0.5.5.post3: the pools passed as they are)
        from sglang.srt.mem_cache.chunk_cache import ChunkCache

        return ChunkCache(page_size=page, **pools)
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    if rel.chunk_cache:
        from sglang.srt.mem_cache.chunk_cache import ChunkCache

        return ChunkCache(CacheInitParams(disable=True, page_size=page, is_eagle=True, **pools))
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    return UnifiedRadixCache(
        CacheInitParams(
            disable=True, page_size=page, is_eagle=True, tree_components=(ComponentType.FULL,), **pools
        )
    )


def prefilled(rank: Any, rel: Release, rid: str, n: int) -> Any:
    """A real ``Req`` of an ``n``-token prompt, prefilled: its row, its KV, ``kv_*_len = n`` (on the
    unified tree after its match and lock, as the adder takes a request)."""
    import array

    import torch
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    req = Req(rid, "", list(range(1, n + 1)), SamplingParams(max_new_tokens=100_000))
    if rel.token_array:
        req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
    if rel.tree_lock:  # (0.5.23: the match finds nothing; the lock is the root's)
        req.init_next_round_input(rank.tree_cache)
        req.lock = rank.tree_cache.lock(req.last_node)
    if rel.legacy:  # (up to 0.5.6: alloc(n), the row's index set on the request)
        req.req_pool_idx = rank.req_to_token_pool.alloc(1)[0]
    else:
        rank.req_to_token_pool.alloc([req])
    one = functools.partial(torch.tensor, dtype=torch.int64)
    alloc = rank.token_to_kv_pool_allocator
    if rank.page_size > 1:
        loc = alloc.alloc_extend(one([0]), one([0]), one([n]), one([n]), one([-1]), n)
    else:
        loc = alloc.alloc(n)
    rank.req_to_token_pool.write((_record(rel, req).req_pool_idx, slice(0, n)), loc.to(torch.int32))
    if rel.unified_tree and rel.kv_lens == "req":  # 0.5.17: a ReqKvInfo made at the first allocation
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        req.kv = ReqKvInfo(kv_allocated_len=n, swa_evicted_seqlen=0)
    (req.kv if rel.unified_tree else req).kv_allocated_len = n
    _record(rel, req).kv_committed_len = n
    return req


def _batch(rank: Any, rel: Release, reqs: list[Any]) -> Any:
    """The decode batch's fields the release's spec preparation reads."""
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    committed = torch.tensor([_record(rel, r).kv_committed_len for r in reqs], dtype=torch.int64)
    return SimpleNamespace(
        reqs=reqs, token_to_kv_pool_allocator=rank.token_to_kv_pool_allocator,
        req_to_token_pool=rank.req_to_token_pool, tree_cache=rank.tree_cache, device="cpu",
        req_pool_indices=torch.tensor([_record(rel, r).req_pool_idx for r in reqs], dtype=torch.int64),
        seq_lens=committed, seq_lens_cpu=committed.clone(), hisparse_coordinator=None,
        spec_algorithm=SpeculativeAlgorithm.EAGLE,
        sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
        maybe_evict_swa=lambda: None, maybe_wait_verify_done=lambda: None, batch_size=lambda: len(reqs),
    )  # fmt: skip


def _draft_input() -> Any:
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    return EagleDraftInput.__new__(EagleDraftInput)


def _by_draft(rank: Any, rel: Release, batch: Any) -> int:
    """0.5.5.post3: the draft input carries the allocated lengths (``allocate_lens``, kept in step
    with the batch by its filter and merge: each request's ``kv_allocated_len``); what the verify
    accepted is committed into ``seq_lens``, which ``prepare_for_decode`` copies to the request."""
    import torch

    draft = _draft_input()
    draft.allocate_lens = torch.tensor([r.kv_allocated_len for r in batch.reqs], dtype=torch.int64)
    draft.prepare_for_decode(batch)
    return 0


def _by_request(rank: Any, rel: Release, batch: Any) -> int:
    """0.5.6 - 0.5.13: ``prepare_for_decode`` tops up from the request's own ``kv_allocated_len``
    (from 0.5.12 it pre-claims the bonus token: 1, which the resolve does not commit again)."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    prepare = EagleDraftInput.prepare_for_decode
    prepare(_draft_input(), batch)
    return int("kv_committed_len += 1" in inspect.getsource(prepare))


def _by_allocation(rank: Any, rel: Release, batch: Any) -> int:
    """0.5.17 on: ``ScheduleBatch.prepare_for_decode``'s spec branch, the dispatcher that routes
    EAGLE to ``eagle_prepare_for_decode`` and its ``alloc_for_spec_decode`` over ``req.kv``."""
    from sglang.srt.speculative.spec_utils import spec_prepare_for_decode

    spec_prepare_for_decode(batch)
    return 0


_PREPARE: dict[SpecPath, Callable[[Any, Release, Any], int]] = {
    SpecPath.DRAFT: _by_draft,
    SpecPath.REQUEST: _by_request,
    SpecPath.ALLOCATION: _by_allocation,
}


def spec_step(rank: Any, rel: Release, reqs: list[Any], rng: random.Random, *, aligned: bool = False) -> None:
    """One decode step of ``reqs``: the release's own decode preparation (PR #31616's page-aligned
    length when ``aligned``), then 1 - 4 tokens accepted per request and committed as the resolve
    commits them (less a bonus token the preparation pre-claimed)."""
    preclaimed = _PREPARE[rel.spec](rank, rel, _batch(rank, rel, reqs))
    if aligned:
        for req in reqs:
            _align(rank, rel, req)
    for req in reqs:
        accepted = rng.randint(1, 4)
        _record(rel, req).kv_committed_len += accepted - preclaimed
        req.output_ids.extend([5] * accepted)


def _align(rank: Any, rel: Release, req: Any) -> None:
    """PR #31616: ``kv_allocated_len`` up to the page end -- the rest of the last page, which the
    allocator handed out with it, recorded in the row."""
    import torch

    page, end = rank.page_size, allocated(rel, req)
    aligned = -(-end // page) * page
    if aligned > end:
        row = rank.req_to_token_pool.req_to_token[_record(rel, req).req_pool_idx]
        last = int(row[end - 1])
        row[end:aligned] = torch.arange(last + 1, last + 1 + aligned - end, dtype=row.dtype)
        (req.kv if rel.unified_tree else req).kv_allocated_len = aligned


def release(rank: Any, rel: Release, req: Any, *, abort: bool = False) -> None:
    """The request finishes (``abort``: is aborted; the output processing finishes it the same way):
    the release's own ``release_kv_cache`` (0.5.23: ``checkpoint=True``, as for a finished request)."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH
    from sglang.srt.mem_cache.common import release_kv_cache

    req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
    release_kv_cache(req, rank.tree_cache, **({"checkpoint": True} if rel.tree_lock else {}))

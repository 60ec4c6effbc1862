"""Speculative decoding's KV books on an SGLang release's own classes (spec v2, 0.5.6 - 0.5.13:
``EagleDraftInput.prepare_for_decode`` over-allocates into ``kv_allocated_len``; run in the
release's venv).

:func:`paged_pools` gives a scheduler-shaped object the release's ``ReqToTokenPool``,
``PagedTokenToKVPoolAllocator`` and ``ChunkCache`` (a PD decode rank's tree); :func:`prefilled`
makes a real ``Req`` whose prompt's KV is allocated and recorded as ``prepare_for_extend`` records
it; :func:`spec_step` runs the release's own ``prepare_for_decode`` for a batch (each request topped
up to ``kv_committed_len + 2 * get_alloc_len_per_decode`` -- an unaligned length up to 0.5.16, the
tail PR #31616 calls stranded) and then commits 1 - 4 accepted tokens per request, as spec v2's
verify and resolve do; :func:`release` is the release's ``release_kv_cache``.  ``aligned`` applies
PR #31616's idea (``kv_allocated_len`` rounded up to the page end: the allocator hands out the same
whole pages, and the row records their slots).  What is stood in for: the model (the acceptance is
drawn), and two Triton kernels, each by the same arithmetic in torch -- ``alloc_extend``'s (the
allocator module's own ``alloc_extend_naive``; 0.5.6 has none: :func:`_extend`) and
``assign_req_to_token_pool``'s flat write (``row * width + column``, unmasked, as the kernel
addresses the table).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import random
from types import SimpleNamespace
from typing import Any

from rigs.sglang.releases import Release
from rigs.sglang.server_args import publish_server_args

__all__ = ["SPEC", "paged_pools", "prefilled", "release", "spec_step"]

# EAGLE as the entries run it: 3 draft steps, topk 1, 4 draft tokens (alloc_len_per_decode 4)
NUM_STEPS, TOPK, DRAFT_TOKENS = 3, 1, 4
SPEC = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": NUM_STEPS,
    "speculative_eagle_topk": TOPK,
    "speculative_num_draft_tokens": DRAFT_TOKENS,
    "attention_backend": "torch_native",  # get_last_loc's torch path
}


def _stand_in_kernels(page: int) -> Any:
    """The allocator module, its ``alloc_extend`` kernel run as its torch reference, and the spec
    modules' ``assign_req_to_token_pool_func`` as the kernel's flat write."""
    from sglang.srt.speculative import eagle_info_v2, spec_utils

    paged: Any
    try:
        paged = importlib.import_module("sglang.srt.mem_cache.allocator.paged")
    except ImportError:  # up to 0.5.12 the allocators are one module
        paged = importlib.import_module("sglang.srt.mem_cache.allocator")

    naive = getattr(paged, "alloc_extend_naive", None)  # (0.5.6's module has none: _extend)

    def launch(prefix: Any, seq: Any, last: Any, free: Any, out: Any, *_: Any) -> None:
        if naive is None:
            _extend(prefix, seq, last, free, out, page)
        else:
            naive(prefix, seq, last, free, out, page, "cpu")

    class Grid:
        def __getitem__(self, grid: Any) -> Any:
            return launch

    paged.alloc_extend_kernel = Grid()
    spec_utils.assign_req_to_token_pool_func = _assign
    if hasattr(eagle_info_v2, "assign_req_to_token_pool_func"):
        eagle_info_v2.assign_req_to_token_pool_func = _assign
    return paged


def _extend(prefix: Any, seq: Any, last: Any, free: Any, out: Any, page: int) -> None:
    """``alloc_extend``'s kernel where its module has no torch reference, by its arithmetic: each
    request's new slots are the rest of its last page (after ``last``), then whole pages off the
    free list in order, the last one partly."""
    import torch

    at, taken = 0, 0
    for p, s, end in zip(prefix.tolist(), seq.tolist(), last.tolist(), strict=True):
        edge = min(s, -(-p // page) * page)  # the last page's end
        out[at : at + edge - p] = torch.arange(end + 1, end + 1 + edge - p)
        pages = -(-s // page) - -(-p // page)
        slots = (free[taken : taken + pages, None] * page + torch.arange(page)).reshape(-1)
        out[at + edge - p : at + s - p] = slots[: s - edge]
        at, taken = at + s - p, taken + pages


def _assign(rows: Any, table: Any, start: Any, end: Any, out: Any, bs: int) -> None:
    width, flat, at = table.shape[1], table.view(-1), 0
    for i in range(bs):
        s, e, r = int(start[i]), int(end[i]), int(rows[i])
        flat[r * width + s : r * width + e] = out[at : at + e - s].to(flat.dtype)
        at += e - s


def _worker_constant() -> None:
    """What the EAGLE v2 worker's constructor sets: ``EagleDraftInput.ALLOC_LEN_PER_DECODE``, the
    per-decode length 0.5.6's ``prepare_for_decode`` reads (from 0.5.9 it asks
    ``get_alloc_len_per_decode``, which reads the server args)."""
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    steps, topk, drafts = NUM_STEPS, TOPK, DRAFT_TOKENS
    EagleDraftInput.ALLOC_LEN_PER_DECODE = max(steps * topk, drafts)


def paged_pools(rank: Any, rel: Release, *, pages: int, page: int, rows: int, width: int) -> None:
    """The release's rows, KV allocator (paged where ``page`` > 1) and chunk cache on ``rank``, EAGLE on."""
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    publish_server_args(rel, page_size=page, **SPEC)
    paged = _stand_in_kernels(page)
    _worker_constant()
    rank.req_to_token_pool = ReqToTokenPool(rows, width, "cpu", False)
    rank.token_to_kv_pool_allocator = (  # SGLang's own choice: the plain allocator at page 1
        paged.PagedTokenToKVPoolAllocator(pages * page, page, torch.float16, "cpu", None, need_sort=False)
        if page > 1
        else TokenToKVPoolAllocator(pages, torch.float16, "cpu", None, need_sort=False)
    )
    params = CacheInitParams(
        disable=True, req_to_token_pool=rank.req_to_token_pool,
        token_to_kv_pool_allocator=rank.token_to_kv_pool_allocator, page_size=page,
    )  # fmt: skip
    rank.tree_cache = ChunkCache(params)
    rank.page_size, rank.cache_params = page, None  # (a plain model: no Mamba pool)


def prefilled(rank: Any, rel: Release, rid: str, n: int) -> Any:
    """A real ``Req`` of an ``n``-token prompt, prefilled: its row, its KV, ``kv_*_len = n``."""
    import array

    import torch
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    req = Req(rid, "", list(range(1, n + 1)), SamplingParams(max_new_tokens=100_000))
    if rel.token_array:
        req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
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
    rank.req_to_token_pool.write((req.req_pool_idx, slice(0, n)), loc.to(torch.int32))
    req.kv_allocated_len = req.kv_committed_len = n
    return req


def spec_step(rank: Any, reqs: list[Any], rng: random.Random, *, aligned: bool = False) -> None:
    """One decode step of ``reqs``: the release's ``prepare_for_decode`` (PR #31616's page-aligned
    length when ``aligned``), then 1 - 4 tokens accepted per request (from 0.5.12 the bonus token
    is pre-claimed in ``prepare_for_decode``; resolve commits the rest)."""
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    batch = SimpleNamespace(
        reqs=reqs, token_to_kv_pool_allocator=rank.token_to_kv_pool_allocator,
        req_to_token_pool=rank.req_to_token_pool, tree_cache=rank.tree_cache, device="cpu",
        req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64),
        seq_lens=torch.tensor([r.kv_committed_len for r in reqs], dtype=torch.int64),
        sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
        maybe_evict_swa=lambda: None, maybe_wait_verify_done=lambda: None, batch_size=lambda: len(reqs),
    )  # fmt: skip
    prepare = EagleDraftInput.prepare_for_decode
    preclaimed = "kv_committed_len += 1" in inspect.getsource(prepare)
    prepare(EagleDraftInput.__new__(EagleDraftInput), batch)
    if aligned:
        for req in reqs:
            _align(rank, req)
    for req in reqs:
        accepted = rng.randint(1, 4)
        req.kv_committed_len += accepted - int(preclaimed)
        req.output_ids.extend([5] * accepted)


def _align(rank: Any, req: Any) -> None:
    """PR #31616: ``kv_allocated_len`` up to the page end -- the rest of the last page, which the
    allocator handed out with it, recorded in the row."""
    import torch

    page, end = rank.page_size, int(req.kv_allocated_len)
    aligned = -(-end // page) * page
    if aligned > end:
        row = rank.req_to_token_pool.req_to_token[req.req_pool_idx]
        last = int(row[end - 1])
        row[end:aligned] = torch.arange(last + 1, last + 1 + aligned - end, dtype=row.dtype)
        req.kv_allocated_len = aligned


def release(rank: Any, req: Any, *, abort: bool = False) -> None:
    """The request finishes (``abort``: is aborted): the release's own ``release_kv_cache``."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH
    from sglang.srt.mem_cache.common import release_kv_cache

    req.finished_reason = FINISH_ABORT("aborted") if abort else FINISH_LENGTH(len(req.output_ids))
    release_kv_cache(req, rank.tree_cache)

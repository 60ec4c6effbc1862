"""Speculative decoding's over-allocation at ``page_size > 1`` on a real SGLang release's classes:
what the release frees, and what the probe's full-KV census says of it while requests run.

Run inside the release's venv (``python -m tests.sglang_real.check_spec_tail 0.5.9``): the release's
own ``ReqToTokenPool``, ``PagedTokenToKVPoolAllocator`` and ``ChunkCache``, real ``Req`` objects,
spec v2's own ``EagleDraftInput.prepare_for_decode`` (EAGLE, topk 1, page 4: each step tops a request
up to ``kv_committed_len + 2 * get_alloc_len_per_decode`` -- on 0.5.9 - 0.5.13 an unaligned length,
the tail PR #31616 calls stranded) and ``release_kv_cache``.  Stood in: the model (the verify step
commits a random 1 - 4 tokens, as spec v2's resolve does) and two Triton kernels, each by the same
arithmetic in torch (``alloc_extend``'s: the module's own ``alloc_extend_naive``;
``assign_req_to_token_pool``'s flat write, ``row * width + column``).

Checks, per seed: at every step the census (:func:`poolwatch.probe.sglang.kv_census.kv_census`, asked
to read the tails in the rows too) names no ``unreleased`` page and no other fault -- with rows
reused, the columns past an unaligned ``kv_allocated_len`` up to its page end hold an earlier
owner's entries, which the census must not read as the request's -- and the allocator's footprint
is the rows' written pages; after every
request's ``release_kv_cache`` every page is free again -- the unaligned tail shares its page with
the last recorded slot, and the paged free gives back whole pages, so S10 strands nothing here.
One JSON line per seed; exit code = failures.
"""

from __future__ import annotations

import functools
import random
import sys
from types import SimpleNamespace
from typing import Any

from rigs.checks import failures, report, run
from rigs.sglang.releases import release
from rigs.sglang.server_args import publish_server_args

PAGE, PAGES, ROWS, WIDTH = 4, 256, 8, 512
SEEDS = (1, 2, 3)
STEPS = 40


def _stand_in_kernels() -> Any:
    """The allocator's module with its torch reference for ``alloc_extend``'s kernel, and the spec
    module's ``assign_req_to_token_pool_func`` as the kernel's flat write."""
    import importlib

    from sglang.srt.speculative import eagle_info_v2, spec_utils

    try:
        paged = importlib.import_module("sglang.srt.mem_cache.allocator.paged")
    except ImportError:  # up to 0.5.12 the allocators are one module
        paged = importlib.import_module("sglang.srt.mem_cache.allocator")

    def launch(prefix: Any, seq: Any, last: Any, free: Any, out: Any, *_: Any) -> None:
        paged.alloc_extend_naive(prefix, seq, last, free, out, PAGE, "cpu")

    class Grid:
        def __getitem__(self, grid: Any) -> Any:
            return launch

    def assign(rows: Any, table: Any, start: Any, end: Any, out: Any, bs: int) -> None:
        width, flat, at = table.shape[1], table.view(-1), 0
        for i in range(bs):
            s, e, r = int(start[i]), int(end[i]), int(rows[i])
            flat[r * width + s : r * width + e] = out[at : at + e - s].to(flat.dtype)
            at += e - s

    paged.alloc_extend_kernel = Grid()
    spec_utils.assign_req_to_token_pool_func = assign
    if hasattr(eagle_info_v2, "assign_req_to_token_pool_func"):
        eagle_info_v2.assign_req_to_token_pool_func = assign
    return paged


class Rank:
    """A paged dense rank of the release, EAGLE spec v2 on, with its running requests."""

    def __init__(self, version: str) -> None:
        import torch
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.chunk_cache import ChunkCache
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

        self.rel = release(version)
        publish_server_args(
            self.rel, page_size=PAGE, speculative_algorithm="EAGLE", speculative_num_steps=3,
            speculative_eagle_topk=1, speculative_num_draft_tokens=4, attention_backend="torch_native",
        )  # fmt: skip
        paged = _stand_in_kernels()
        self.req_to_token_pool = ReqToTokenPool(ROWS, WIDTH, "cpu", False)
        self.token_to_kv_pool_allocator = paged.PagedTokenToKVPoolAllocator(
            PAGES * PAGE, PAGE, torch.float16, "cpu", None, need_sort=False
        )
        params = CacheInitParams(
            disable=True, req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator, page_size=PAGE,
        )  # fmt: skip
        self.tree_cache = ChunkCache(params)
        self.running: list[Any] = []
        self.made = 0

    def arrive(self, rng: random.Random) -> None:
        """A prefilled request: its row, its prompt's pages, ``kv_*_len`` as ``prepare_for_extend``
        sets them."""
        import array

        import torch
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.made += 1
        n = rng.randrange(5, 60)
        req = Req(f"r{self.made}", "", list(range(1, n + 1)), SamplingParams(max_new_tokens=10_000))
        if self.rel.token_array:
            req.origin_input_ids = array.array(req.output_ids.typecode, req.origin_input_ids)
        self.req_to_token_pool.alloc([req])
        one = functools.partial(torch.tensor, dtype=torch.int64)
        loc = self.token_to_kv_pool_allocator.alloc_extend(
            one([0]), one([0]), one([n]), one([n]), one([-1]), n
        )
        self.req_to_token_pool.write((req.req_pool_idx, slice(0, n)), loc.to(torch.int32))
        req.kv_allocated_len = req.kv_committed_len = n
        self.running.append(req)

    def decode(self, rng: random.Random) -> None:
        """Spec v2's ``prepare_for_decode`` for the running batch, then each request's verify commits
        1 - 4 tokens (0.5.12 on pre-claim the bonus token there; resolve commits the rest)."""
        import inspect

        import torch
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        reqs = self.running
        batch = SimpleNamespace(
            reqs=reqs, token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            req_to_token_pool=self.req_to_token_pool, tree_cache=self.tree_cache, device="cpu",
            req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64),
            seq_lens=torch.tensor([r.kv_committed_len for r in reqs], dtype=torch.int64),
            sampling_info=SimpleNamespace(penalizer_orchestrator=SimpleNamespace(is_required=False)),
            maybe_evict_swa=lambda: None, maybe_wait_verify_done=lambda: None, batch_size=lambda: len(reqs),
        )  # fmt: skip
        prepare = EagleDraftInput.prepare_for_decode
        preclaimed = "kv_committed_len += 1" in inspect.getsource(prepare)
        prepare(EagleDraftInput.__new__(EagleDraftInput), batch)
        for req in reqs:
            accepted = rng.randint(1, 4)
            req.kv_committed_len += accepted - int(preclaimed)
            req.output_ids.extend([5] * accepted)

    def finish(self, req: Any) -> None:
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req.finished_reason = FINISH_LENGTH(len(req.output_ids))
        release_kv_cache(req, self.tree_cache)
        self.running.remove(req)


def _census(rank: Rank) -> Any:
    from poolwatch.probe.core.reading import Reading
    from poolwatch.probe.sglang.kv_census import kv_census
    from poolwatch.probe.sglang.requests import LiveSet
    from poolwatch.probe.sglang.shapes import shape_for_version

    live = LiveSet(holders=tuple(rank.running), waiting=(), chunked=None)
    reading = Reading()
    # lost: as large as the pool, so the census reads every request's tail inside its row too
    census = kv_census(
        rank, shape_for_version(rank.rel.version), reading, live, idle=False, lost=PAGES * PAGE
    )
    assert census is not None
    assert not reading.failures, reading.failures
    return census


def _rows_agree(rank: Rank) -> list[str]:
    """The allocator's footprint against the pages of the rows' written columns, up to each
    ``kv_allocated_len`` (the last page partly)."""
    held = PAGES - len(rank.token_to_kv_pool_allocator.free_pages)
    table = rank.req_to_token_pool.req_to_token
    pages = {
        int(t) // PAGE
        for req in rank.running
        for t in table[req.req_pool_idx, : req.kv_allocated_len].tolist()
    }
    return [] if held == len(pages) else [f"held {held} pages, rows name {len(pages)}"]


def check(version: str, seed: int) -> None:
    rng, rank = random.Random(seed), Rank(version)
    named: list[Any] = []
    disagree: list[str] = []
    unaligned = 0
    for _ in range(STEPS):
        while not rank.running or (len(rank.running) < ROWS - 1 and rng.random() < 0.5):
            rank.arrive(rng)
        rank.decode(rng)
        unaligned += sum(1 for r in rank.running if r.kv_allocated_len % PAGE)
        census = _census(rank)
        named += [t.kind.value for t in census.tripwires("check_spec_tail", 0)]
        disagree += _rows_agree(rank)
        for req in [r for r in rank.running if rng.random() < 0.15]:
            rank.finish(req)
    for req in list(rank.running):
        rank.finish(req)
    free = len(rank.token_to_kv_pool_allocator.free_pages)
    report(
        f"{version}: EAGLE spec v2 at page {PAGE} strands no page, the census names none (seed {seed})",
        not named and not disagree and free == PAGES and unaligned > 0,
        {"tripwires": named[:8], "disagree": disagree[:3], "free_pages": free, "pages": PAGES,
         "unaligned_allocations": unaligned, "requests": rank.made},
    )  # fmt: skip


def main(argv: list[str]) -> int:
    for seed in SEEDS:
        run(f"spec tail, seed {seed}", functools.partial(check, argv[0], seed))
    return failures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Speculative decoding's over-allocation at ``page_size > 1`` on a real SGLang release's classes:
what the release frees, and what the probe's full-KV census says of it while requests run.

Run inside the release's venv (``python -m tests.sglang_real.check_spec_tail 0.5.9``): the release's
own ``ReqToTokenPool``, ``PagedTokenToKVPoolAllocator`` and ``ChunkCache``, real ``Req`` objects,
spec v2's own ``EagleDraftInput.prepare_for_decode`` (EAGLE, topk 1, page 4: each step tops a request
up to ``kv_committed_len + 2 * get_alloc_len_per_decode`` -- on 0.5.9 - 0.5.13 an unaligned length,
the tail PR #31616 calls stranded) and ``release_kv_cache``, driven by :mod:`rigs.sglang.spec`
(which says what is stood in for: the model's acceptance and two Triton kernels).

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
from typing import Any

from rigs.checks import failures, report, run
from rigs.sglang.releases import release
from rigs.sglang.spec import paged_pools, prefilled, spec_step
from rigs.sglang.spec import release as spec_release

PAGE, PAGES, ROWS, WIDTH = 4, 256, 8, 512
SEEDS = (1, 2, 3)
STEPS = 40


class Rank:
    """A paged dense rank of the release, EAGLE spec v2 on (:mod:`rigs.sglang.spec`), and its
    running requests."""

    def __init__(self, version: str) -> None:
        self.rel = release(version)
        paged_pools(self, self.rel, pages=PAGES, page=PAGE, rows=ROWS, width=WIDTH)
        self.running: list[Any] = []
        self.made = 0

    def arrive(self, rng: random.Random) -> None:
        self.made += 1
        self.running.append(prefilled(self, self.rel, f"r{self.made}", rng.randrange(5, 60)))

    def decode(self, rng: random.Random) -> None:
        spec_step(self, self.rel, self.running, rng)

    def finish(self, req: Any) -> None:
        spec_release(self, self.rel, req)
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

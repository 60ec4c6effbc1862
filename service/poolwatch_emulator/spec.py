"""EAGLE speculative decoding as SGLang's spec v2 keeps its books (0.5.9+
``EagleDraftInputV2Mixin.prepare_for_decode``, ``_resolve_spec_overlap_token_ids``,
``mem_cache/common.py:release_kv_cache``).

Before each decode step every request is topped up so that ``kv_allocated_len`` reaches
``kv_committed_len + 2 * alloc_len_per_decode`` (the over-allocation: room for the draft tokens of
this step and the next); the slots are written into the request's ``req_to_token`` row.  The
verify step accepts ``1 .. num_draft_tokens`` tokens (the first always, each draft with
``accept_rate`` until the first rejection), which advance ``kv_committed_len``; the rejected
drafts' slots stay allocated and are reused by the next step.  At release, after the prefix
cache has taken the committed KV, ``[ceil_page(kv_committed_len), kv_allocated_len)`` is freed.

The request rows are sized as the fix of PR #26972 sizes them (wide enough for the reserve); the
narrower row of the releases before it (``context_len + 4 + num_draft_tokens``) is what
``spec-row-clamped-release`` reads the release's slice through.  Faults: ``spec-stranded-tail-page``
(S10: a paged over-allocation left out of ``kv_allocated_len``), ``spec-row-clamped-release``
(S11), and ``spec-swa-frontier-off-by-one`` (S09, in :mod:`poolwatch_emulator.swa_cache`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poolwatch_emulator.req import Req, ScheduleBatch

__all__ = ["SchedulerSpecMixin", "SpecConfig", "ceil_page", "free_overallocated"]


def ceil_page(n: int, page: int) -> int:
    return -(-n // page) * page


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """``--speculative-algorithm EAGLE`` and its knobs (SGLang's server-arg names without the prefix)."""

    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    accept_rate: float = 0.7  # each draft token is accepted with this probability, until one is not

    def check(self, page_size: int, release: str) -> None:
        """Raise ``ValueError`` naming what SGLang would refuse (or what the emulator cannot model)."""
        if release == "0.5.4.post1":
            raise ValueError(
                "speculative decoding: 0.5.4.post1 keeps no kv_allocated_len (its EAGLE frees rejected "
                "drafts within the step); the emulator models spec v2's books on 0.5.9 and 0.5.12"
            )
        if min(self.num_steps, self.eagle_topk, self.num_draft_tokens) < 1 or not 0 <= self.accept_rate <= 1:
            raise ValueError("speculative decoding: steps, topk, draft tokens >= 1 and accept_rate in [0, 1]")
        if page_size > 1 and self.eagle_topk > 1:
            raise ValueError(
                "speculative decoding: topk > 1 with page_size > 1 is NotImplementedError in 0.5.9"
            )

    def alloc_len_per_decode(self) -> int:
        """``get_alloc_len_per_decode``: spec v2 allocates ``max(topk * num_steps, num_draft_tokens)``."""
        return max(self.num_steps * self.eagle_topk, self.num_draft_tokens)

    def narrow_headroom(self) -> int:
        """The request row's headroom past ``context_len`` before PR #26972 (``4 + num_draft_tokens``)."""
        return 4 + self.num_draft_tokens

    def row_headroom(self, page_size: int) -> int:
        """The headroom the fix sizes for: the reserve, past the last partial page."""
        return max(self.narrow_headroom(), 2 * self.alloc_len_per_decode() + page_size)

    def tokens_required_next_decode(self, page_size: int) -> int:
        """Per request, ``ScheduleBatch.new_tokens_required_next_decode`` for spec v2 (whole pages)."""
        per_topk, tokens = self.num_steps, self.num_draft_tokens
        if page_size > 1:
            per_topk, tokens = ceil_page(per_topk, page_size), ceil_page(tokens, page_size)
        return 2 * max(per_topk * self.eagle_topk, tokens)


def free_overallocated(cache: Any, req: Req) -> None:
    """``release_kv_cache``'s second free: ``[ceil_page(kv_committed_len), kv_allocated_len)``, read
    through the request's row (a slice clamps at the row's end, silently, as torch's and SGLang's do)."""
    start, end = ceil_page(req.kv_committed_len, cache.page_size), req.kv_allocated_len
    narrow = getattr(cache, "emu_narrow_row", None)
    if start >= end or req.req_pool_idx is None:
        return
    if narrow is not None and end > narrow and cache.faults.fires("spec-row-clamped-release"):
        end = narrow  # S11: the release reads the pre-#26972 row, as wide as context_len + 4 + drafts
    if start < end:
        row = cache.req_to_token_pool.req_to_token[req.req_pool_idx, start:end]
        cache.token_to_kv_pool_allocator.free(row.long())


class SchedulerSpecMixin:
    """Mixed into the scheduler: spec v2's decode step (``self`` is the scheduler)."""

    def emu_spec_init(self: Any, seed: int) -> None:
        self.emu_spec_rng = random.Random(seed ^ 0x5BEC)
        self.spec_num_accepted_tokens = self.spec_num_forward_ct = 0

    def emu_spec_prepare_for_decode(self: Any, batch: ScheduleBatch) -> None:
        """Top every request up to ``kv_committed_len + 2 * alloc_len_per_decode`` slots."""
        spec: SpecConfig = self.settings.speculative
        reserve = 2 * spec.alloc_len_per_decode()
        table = self.req_to_token_pool.req_to_token
        for r in batch.reqs:
            x = r.kv_committed_len + reserve - r.kv_allocated_len
            if x <= 0:
                continue
            cur = r.kv_allocated_len
            last_loc = int(table[r.req_pool_idx, cur - 1]) if cur else 0
            locs = self.emu_alloc_kv(cur, last_loc, x)
            self.req_to_token_pool.write(r.req_pool_idx, cur, locs)
            ps = self.page_size
            new_pages = ps > 1 and ceil_page(cur + x, ps) > ceil_page(cur, ps)  # get_num_new_pages > 0
            if new_pages and self.faults.fires("spec-stranded-tail-page"):
                continue  # S10: the paged path never records the allocation in kv_allocated_len
            r.kv_allocated_len += x

    def emu_spec_accept(self: Any, req: Req) -> int:
        """Tokens the verify step accepts for ``req``: 1, plus each draft until the first rejection."""
        spec: SpecConfig = self.settings.speculative
        n = 1
        while n < spec.num_draft_tokens and self.emu_spec_rng.random() < spec.accept_rate:
            n += 1
        return min(n, max(1, req.max_new_tokens - len(req.output_ids)))

    def emu_spec_verify(self: Any, req: Req, token: int) -> int:
        """Commit the accepted tokens of ``req`` (KV and output ids); how many."""
        n: int = self.emu_spec_accept(req)
        req.kv_committed_len += n
        req.output_ids.extend((token + k) % 50_000 + 1 for k in range(n))
        self.spec_num_accepted_tokens += n - 1
        self.spec_num_forward_ct += 1
        return n

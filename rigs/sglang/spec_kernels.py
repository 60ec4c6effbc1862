"""The Triton kernels spec v2's KV books go through on an SGLang release, stood in for on CPU by the
same arithmetic in torch (run in the release's venv; :mod:`rigs.sglang.spec` drives the books).

``alloc_extend``'s kernel runs as the allocator module's own ``alloc_extend_naive`` (0.5.6's module
has none: :func:`_extend`, by its arithmetic), and ``assign_req_to_token_pool``'s as the kernel's
flat write (``row * width + column``, unmasked, as the kernel addresses the table) wherever the
release's spec path looks it up: ``spec_utils`` and ``eagle_info_v2`` (up to 0.5.13), or
``mem_cache.allocation``, whose ``alloc_for_spec_decode`` calls it (0.5.17 on).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["stand_in_kernels"]

# where a release's spec path looks ``assign_req_to_token_pool_func`` up (the modules it has)
_ASSIGNERS = (
    "sglang.srt.speculative.spec_utils",
    "sglang.srt.speculative.eagle_info_v2",
    "sglang.srt.mem_cache.allocation",
)


def stand_in_kernels(page: int) -> Any:
    """The allocator module, its ``alloc_extend`` kernel run as its torch reference, and every spec
    module's ``assign_req_to_token_pool_func`` as the kernel's flat write."""
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
    for name in _ASSIGNERS:
        module: Any
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "assign_req_to_token_pool_func"):
            module.assign_req_to_token_pool_func = _assign
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

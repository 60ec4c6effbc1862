"""Token KV allocators with SGLang's shapes (``mem_cache/allocator.py``, reference §2.1).

* ``free_pages`` and ``release_pages`` are torch int64 tensors of page ids (a page is one token
  when ``page_size == 1``); page 0 is the reserved padding page;
* in PD mode (``need_sort``) frees go to ``release_pages`` and are merged back by
  ``merge_and_sort_free()`` when an allocation runs short;
* ``free()`` concatenates with no dedup, so freeing twice puts an id twice on the lists (the
  paged allocator dedups within one call only), exactly like SGLang.

The SWA allocator wraps a full and a sliding-window allocator and keeps
``full_to_swa_index_mapping`` (0 = no swa slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["SWATokenToKVPoolAllocator", "TokenToKVPoolAllocator"]


def _empty() -> torch.Tensor:
    import torch

    return torch.empty((0,), dtype=torch.int64)


class TokenToKVPoolAllocator:
    """A page allocator over ``size`` token slots (``size // page_size`` pages, ids 1..)."""

    def __init__(self, size: int, page_size: int = 1, *, need_sort: bool = False, device: str = "cpu"):
        if size <= 0 or page_size <= 0 or size % page_size:
            raise ValueError(f"size ({size}) must be a positive multiple of page_size ({page_size})")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.need_sort = need_sort
        self.device = device
        self.is_not_in_free_group = True
        self.free_group: list[torch.Tensor] = []
        self.clear()

    def clear(self) -> None:
        import torch

        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64)
        self.release_pages = _empty()

    def available_size(self) -> int:
        return (len(self.free_pages) + len(self.release_pages)) * self.page_size

    def merge_and_sort_free(self) -> None:
        import torch

        if len(self.release_pages) > 0:
            merged = torch.cat((self.free_pages, self.release_pages))
            self.free_pages, _ = torch.sort(merged)
            self.release_pages = _empty()

    def alloc_pages(self, num_pages: int) -> torch.Tensor | None:
        """Take ``num_pages`` page ids from the front of the free list (None if short)."""
        if num_pages > len(self.free_pages) and self.need_sort:
            self.merge_and_sort_free()
        if num_pages > len(self.free_pages):
            return None
        pages = self.free_pages[:num_pages]
        self.free_pages = self.free_pages[num_pages:]
        return pages

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` token slots on fresh pages (page_size 1: simply slot ids)."""
        return self.alloc_extend_one(0, 0, need_size)

    def alloc_extend_one(self, prefix_len: int, last_loc: int, extend_len: int) -> torch.Tensor | None:
        """Slots for tokens ``[prefix_len, prefix_len + extend_len)`` of one request: the rest of
        its last partial page (which ends at ``last_loc``) first, then whole new pages."""
        import torch

        ps = self.page_size
        room = (-prefix_len) % ps if prefix_len else 0
        in_page = min(room, extend_len)
        rest = extend_len - in_page
        pages = self.alloc_pages(-(-rest // ps))
        if pages is None:
            return None
        head = torch.arange(last_loc + 1, last_loc + 1 + in_page, dtype=torch.int64)
        offsets = torch.arange(ps, dtype=torch.int64)
        tail = (pages.unsqueeze(1) * ps + offsets).reshape(-1)[:rest]
        return torch.cat((head, tail)) if in_page else tail

    def alloc_decode(self, seq_lens: list[int], last_locs: torch.Tensor) -> torch.Tensor | None:
        """One new slot per request whose current length is ``seq_lens[i]`` (before the token)."""
        import torch

        ps = self.page_size
        if ps == 1:
            return self.alloc_pages(len(seq_lens))
        need = torch.tensor([n % ps == 0 for n in seq_lens], dtype=torch.bool)
        pages = self.alloc_pages(int(need.sum()))
        if pages is None:
            return None
        out = last_locs.to(torch.int64) + 1
        out[need] = pages * ps
        return out

    def free(self, free_index: torch.Tensor) -> None:
        """Give slots back (no dedup across calls, like SGLang)."""
        import torch

        if free_index.numel() == 0:
            return
        pages = free_index.to(torch.int64)
        if self.page_size > 1:
            pages = torch.unique(pages // self.page_size)
        if self.need_sort:
            self.release_pages = torch.cat((self.release_pages, pages))
        else:
            self.free_pages = torch.cat((self.free_pages, pages))


class SWATokenToKVPoolAllocator:
    """A full and a sliding-window allocator moving in step; ``size`` is the full size."""

    def __init__(self, size: int, size_swa: int, page_size: int = 1, *, need_sort: bool = False):
        import torch

        self.full_attn_allocator = TokenToKVPoolAllocator(size, page_size, need_sort=need_sort)
        self.swa_attn_allocator = TokenToKVPoolAllocator(size_swa, page_size, need_sort=need_sort)
        self.size = size
        self.size_swa = size_swa
        self.page_size = page_size
        self.need_sort = need_sort
        self.full_to_swa_index_mapping = torch.zeros(size + page_size, dtype=torch.int64)

    @property
    def free_pages(self) -> torch.Tensor:
        return self.full_attn_allocator.free_pages

    @property
    def release_pages(self) -> torch.Tensor:
        return self.full_attn_allocator.release_pages

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def available_size(self) -> int:
        return min(self.full_available_size(), self.swa_available_size())

    def merge_and_sort_free(self) -> None:
        self.full_attn_allocator.merge_and_sort_free()
        self.swa_attn_allocator.merge_and_sort_free()

    def alloc_extend_one(self, prefix_len: int, last_loc: int, extend_len: int) -> torch.Tensor | None:
        full = self.full_attn_allocator.alloc_extend_one(prefix_len, last_loc, extend_len)
        if full is None:
            return None
        swa_last = int(self.full_to_swa_index_mapping[last_loc]) if prefix_len else 0
        swa = self.swa_attn_allocator.alloc_extend_one(prefix_len, swa_last, extend_len)
        if swa is None:  # the window side ran short: give the full slots back
            self.full_attn_allocator.free(full)
            return None
        self.full_to_swa_index_mapping[full] = swa
        return full

    def alloc(self, need_size: int) -> torch.Tensor | None:
        return self.alloc_extend_one(0, 0, need_size)

    def alloc_decode(self, seq_lens: list[int], last_locs: torch.Tensor) -> torch.Tensor | None:
        full = self.full_attn_allocator.alloc_decode(seq_lens, last_locs)
        if full is None:
            return None
        swa_last = self.full_to_swa_index_mapping[last_locs.to(dtype=full.dtype)]
        swa = self.swa_attn_allocator.alloc_decode(seq_lens, swa_last)
        if swa is None:
            self.full_attn_allocator.free(full)
            return None
        self.full_to_swa_index_mapping[full] = swa
        return full

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel() == 0:
            return
        idx = free_index.to(self.full_to_swa_index_mapping.dtype)
        swa = self.full_to_swa_index_mapping[idx]
        self.full_attn_allocator.free(idx)
        self.swa_attn_allocator.free(swa[swa > 0])
        self.full_to_swa_index_mapping[idx] = 0

    def free_swa(self, free_index: torch.Tensor) -> None:
        """Free only the sliding-window side of ``free_index`` (window eviction)."""
        idx = free_index.to(self.full_to_swa_index_mapping.dtype)
        swa = self.full_to_swa_index_mapping[idx]
        self.swa_attn_allocator.free(swa[swa > 0])
        self.full_to_swa_index_mapping[idx] = 0

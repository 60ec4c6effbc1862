"""Request rows and Mamba state slots (``mem_cache/memory_pool.py``, reference §2.2-§2.3).

``ReqToTokenPool.free_slots`` is a Python list of rows; ``MambaPool.free_slots`` a torch int64
tensor.  Both free by appending, with no dedup.  ``HybridReqToTokenPool`` maps rows to Mamba slots
and has the release's API: ``free(idx, free_mamba_cache=True)`` in 0.5.4 (the default that also
frees the Mamba slot, the root of PR #12994) or ``free(req)`` + ``free_mamba_cache(req)`` from
0.5.9.  The Mamba *state* tensors themselves are not modelled: only ownership is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["HybridReqToTokenPool", "MambaPool", "ReqToTokenPool"]


class _ReqLike(Protocol):
    req_pool_idx: int | None
    mamba_pool_idx: torch.Tensor | None


class ReqToTokenPool:
    """Rows of ``req_to_token`` (row r, column t = KV slot of token t of the request in row r)."""

    def __init__(
        self,
        size: int,
        max_context_len: int,
        *,
        first_row: int = 0,
        pre_alloc_size: int = 0,
        free_by_req: bool = False,
    ):
        import torch

        self.size = size
        self.free_by_req = free_by_req  # 0.5.9+: free(req) clears req.req_pool_idx
        self.pre_alloc_size = pre_alloc_size
        self.max_context_len = max_context_len
        self.first_row = first_row
        rows = size + pre_alloc_size + first_row
        self.req_to_token = torch.zeros((rows, max_context_len), dtype=torch.int32)
        self.clear()

    def clear(self) -> None:
        self.free_slots = list(range(self.first_row, self.first_row + self.size + self.pre_alloc_size))

    def available_size(self) -> int:
        return len(self.free_slots)

    def write(self, row: int, start: int, values: torch.Tensor) -> None:
        self.req_to_token[row, start : start + len(values)] = values.to(self.req_to_token.dtype)

    def alloc(self, need_size: int) -> list[int] | None:
        if need_size > len(self.free_slots):
            return None
        rows, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        return rows

    def free(self, free_index: int | list[int] | _ReqLike) -> None:
        """``free(idx)`` (0.5.4) or ``free(req)`` (0.5.9+: also forgets ``req.req_pool_idx``)."""
        if isinstance(free_index, int):
            self.free_slots.append(free_index)
        elif isinstance(free_index, list):
            self.free_slots.extend(free_index)
        elif free_index.req_pool_idx is not None:
            self.free_slots.append(free_index.req_pool_idx)
            free_index.req_pool_idx = None


class MambaPool:
    """Recurrent-state slots: ids ``first_id .. first_id + size - 1`` on a torch free list."""

    def __init__(self, size: int, *, first_id: int = 0):
        self.size = size
        self.first_id = first_id
        self.clear()

    def clear(self) -> None:
        import torch

        self.free_slots = torch.arange(self.first_id, self.first_id + self.size, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if need_size > len(self.free_slots):
            return None
        out = self.free_slots[:need_size]
        self.free_slots = self.free_slots[need_size:]
        return out

    def free(self, free_index: torch.Tensor) -> None:
        import torch

        if free_index.numel():
            self.free_slots = torch.cat((self.free_slots, free_index.reshape(-1).to(torch.int64)))

    def copy_from(self, src_index: torch.Tensor, dst_index: torch.Tensor) -> None:
        """Copy states (ownership only: nothing to copy in the emulator)."""

    def fork_from(self, src_index: torch.Tensor) -> torch.Tensor | None:
        dst = self.alloc(1)
        if dst is not None:
            self.copy_from(src_index, dst)
        return dst


class HybridReqToTokenPool(ReqToTokenPool):
    """Rows plus one Mamba slot per row; the release decides the free API."""

    def __init__(
        self,
        size: int,
        max_context_len: int,
        mamba_size: int,
        *,
        first_row: int = 0,
        mamba_first_id: int = 0,
        split_mamba_free: bool = False,
        pre_alloc_size: int = 0,
    ):
        import torch

        super().__init__(
            size,
            max_context_len,
            first_row=first_row,
            pre_alloc_size=pre_alloc_size,
            free_by_req=split_mamba_free,
        )
        self.mamba_pool = MambaPool(mamba_size, first_id=mamba_first_id)
        self.split_mamba_free = split_mamba_free
        rows = size + pre_alloc_size + first_row
        self.req_index_to_mamba_index_mapping = torch.zeros(rows, dtype=torch.int32)

    def alloc_for(self, reqs: list[_ReqLike]) -> list[int] | None:
        """Rows and Mamba slots for ``reqs``: a set ``req_pool_idx`` (0.5.9 chunked request) and
        a set ``mamba_pool_idx`` (COW from the tree, or a chunked request) are re-used."""
        fresh = [r for r in reqs if r.req_pool_idx is None or not self.split_mamba_free]
        need_mamba = sum(1 for r in reqs if r.mamba_pool_idx is None)
        if len(fresh) > len(self.free_slots) or need_mamba > self.mamba_pool.available_size():
            return None
        rows = self.alloc(len(fresh)) or []
        for r, row in zip(fresh, rows, strict=True):
            r.req_pool_idx = row
        for r in reqs:
            if r.mamba_pool_idx is None:
                slot = self.mamba_pool.alloc(1)
                assert slot is not None  # checked above
                r.mamba_pool_idx = slot
            assert r.req_pool_idx is not None
            self.req_index_to_mamba_index_mapping[r.req_pool_idx] = int(r.mamba_pool_idx)
        return [r.req_pool_idx for r in reqs if r.req_pool_idx is not None]

    def get_mamba_indices(self, row: int) -> torch.Tensor:
        import torch

        return self.req_index_to_mamba_index_mapping[row : row + 1].to(torch.int64)

    def free(self, free_index: int | list[int] | _ReqLike, free_mamba_cache: bool = True) -> None:
        """0.5.4 shape ``free(idx, free_mamba_cache=True)``: the row and, by default, the Mamba slot
        it maps to.  0.5.9 shape ``free(req)``: the row only."""
        if not isinstance(free_index, int | list):
            self.free_req(free_index)
            return
        rows = [free_index] if isinstance(free_index, int) else free_index
        super().free(rows)
        if free_mamba_cache and not self.split_mamba_free:
            for row in rows:
                self.mamba_pool.free(self.get_mamba_indices(row))

    def free_req(self, req: _ReqLike) -> None:
        """0.5.9 shape ``free(req)``: the row only, and forget it on the request."""
        ReqToTokenPool.free(self, req)

    def free_mamba_cache(self, req: _ReqLike) -> None:
        """0.5.9 shape: free ``req.mamba_pool_idx`` and forget it."""
        assert req.mamba_pool_idx is not None, "double free?"
        self.mamba_pool.free(req.mamba_pool_idx)
        req.mamba_pool_idx = None

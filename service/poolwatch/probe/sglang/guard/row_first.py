"""The KV guard's window for a row-first release: up to 0.5.6 ``ChunkCache.cache_finished_req`` gives
the request's row back before it frees the KV through it, and SGLang's ``release_kv_cache``
(0.5.5.post3, 0.5.6) then frees the request's speculative over-allocation through that same row.

Both frees read a row that is on the free list by then, and both are the release's own, not a stale
pointer's:

* **inside** ``cache_finished_req``: the row it gave back (if the row was held when the release
  began -- a second release of the same request is not);
* **right after it**: the over-allocation ``release_kv_cache`` frees next -- the columns
  ``[ceil_page(kv_committed_len), kv_allocated_len)`` of that row (EAGLE spec v2 tops every running
  request up past its committed KV).  The window is the next KV free through any row only: it
  passes when that free reads those columns, and closes either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolwatch.probe.sglang.guard.rows import RowBook

__all__ = ["RowFirst"]


def _over_allocated(req: Any, page: int) -> tuple[int, int] | None:
    """The columns ``release_kv_cache`` frees past the committed KV (``None``: none, or no lengths)."""
    committed, allocated = getattr(req, "kv_committed_len", None), getattr(req, "kv_allocated_len", None)
    if not isinstance(committed, int) or not isinstance(allocated, int):
        return None
    start = -(-committed // page) * page
    return (start, allocated) if start < allocated else None


class RowFirst:
    """The row a row-first release gave back while it runs, and the over-allocation after it."""

    def __init__(self, rows: RowBook, page: Callable[[], int]) -> None:
        self.rows, self.page = rows, page
        self.releasing: int | None = None  # the row the release in progress gave back
        self.tail: tuple[int, int, int] | None = None  # (row, start, end): the free expected next

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``cache_finished_req`` with the window around it."""

        def cache_finished_req(req: Any, *args: Any, **kwargs: Any) -> Any:
            before, held = self.releasing, None
            try:
                row = getattr(req, "req_pool_idx", None)
                held = row if isinstance(row, int) and not self.rows.released(row) else None
            except Exception:
                held = None
            self.releasing, self.tail = held, None
            try:
                return original(req, *args, **kwargs)
            finally:
                self.releasing = before
                self.tail = self._after(req, held)

        return cache_finished_req

    def _after(self, req: Any, row: int | None) -> tuple[int, int, int] | None:
        try:
            span = _over_allocated(req, self.page()) if row is not None else None
        except Exception:
            span = None
        return None if span is None or row is None else (row, *span)

    def passes(self, row: int, col: int, n: int) -> bool:
        """Whether a free of ``[col, col + n)`` through the given-back ``row`` is the release's own
        (the window closes at every free through a row)."""
        tail, self.tail = self.tail, None
        if row == self.releasing:
            return True
        return tail is not None and tail[0] == row and tail[1] <= col and col + n <= tail[2]

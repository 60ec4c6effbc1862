"""Which request rows are free: the KV guard's owner index (host ints, kept beside SGLang's own list).

A request's KV is freed through its ``req_to_token`` row, and in every family read that happens
while the row is held: the row is given back last (``cache_finished_req`` up to 0.5.6,
``release_kv_cache`` from 0.5.9, ``free_kv_row`` before ``free(req)`` on 0.5.23).  So a free
through a row that is on the request pool's free list is a stale pointer's: its slots were already
released with the row -- into the tree, to the free list, or by now to another request.

The index is a set of free rows, kept current at the request pool's own row frees and allocations
(wrapped on the instance: ``alloc``/``free`` in every family, ``alloc_rows``/``free_rows`` on 0.5.23;
a call nested in another wrapped one is the outer call's).  It is checked in O(1) at a KV
free and never trusted alone:

* it notes the length of SGLang's list after each wrapped call; a length that moved without it
  (a path not wrapped, ``clear()``) rebuilds the set from the list at the next wrapped call or
  check (O(rows), once per such change);
* a row the set calls free is looked up in SGLang's list itself before anything is refused (O(rows),
  only on that suspicion); a row it is not in goes back to held.

So a row wrongly believed free costs one lookup and is never refused on; a row wrongly believed held
is a miss, not a refusal.

It also notes which request each row was handed to (``holder``), where the allocation names the
requests (``alloc(reqs)`` from 0.5.9, the hybrid pool's ``alloc(n, reqs)`` before): the ownership
index (:mod:`~poolwatch.probe.sglang.guard.owners`) reads a held row's request there, and believes
it only while the request still points at that row.  A row's entry goes with the row's free, so
guard never keeps a finished request (its ids, its tensors) alive until its row is handed out
again -- nor frees it then, inside the next allocation.

Cost per row alloc/free: one set update and a length read (0.6 -- 0.8 µs on a loaded 2-core CPU,
``benchmarks/bench_guard_kv.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from poolwatch.probe.sglang.guard.patch import Patch, patch

__all__ = ["RowBook", "RowView", "rows_of"]

log = logging.getLogger("poolwatch.probe")
_TAKE = ("alloc", "alloc_rows")
_GIVE = ("free", "free_rows")


def rows_of(freed: Any) -> list[int]:
    """The rows a request-pool free names: an int, a list of ints, or a request (``req_pool_idx``,
    0.5.23 ``req.kv.req_pool_idx``), read *before* SGLang clears the pointer."""
    if isinstance(freed, int):
        return [freed]
    if isinstance(freed, list | tuple):
        return [int(r) for r in freed]
    if hasattr(freed, "tolist"):
        out = freed.tolist()
        return [int(r) for r in out] if isinstance(out, list) else [int(out)]
    row = getattr(freed, "req_pool_idx", None)
    if row is None and getattr(freed, "kv", None) is not None:
        row = getattr(freed.kv, "req_pool_idx", None)
    return [] if row is None else [int(row)]


class RowBook:
    """The free rows of one request pool (``req_to_token_pool``)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.free: set[Any] = set()
        self.seen = -1  # the list's length after the last call seen (-1: rebuild at the next check)
        self.depth = 0  # wrapped calls in progress (an inner one is its outer one's)
        self.patches: list[Patch] = []
        self.holder: dict[int, Any] = {}  # row -> the request it was handed to (checked at use)
        self.given: Callable[[list[int]], None] | None = None  # told the rows each free gave back

    def install(self) -> bool:
        """Wrap the pool's row allocations and frees on the instance; False if it has neither."""
        if not isinstance(getattr(self.pool, "free_slots", None), list):
            return False
        for name in _TAKE:
            self._add(patch(self.pool, name, self._take))
        for name in _GIVE:
            self._add(patch(self.pool, name, self._give))
        return bool(self.patches)

    def uninstall(self) -> None:
        for done in self.patches:
            done.undo()
        self.patches = []

    def released(self, row: int) -> bool:
        """Whether ``row`` is on the pool's free list now (exact when True)."""
        slots = self.pool.free_slots
        if len(slots) != self.seen:
            self._rebuild(slots)
        if row not in self.free:
            return False
        if row in slots:  # the suspicion, checked against SGLang's own list
            return True
        self._rebuild(slots)
        return False

    def _add(self, done: Patch | None) -> None:
        if done is not None:
            self.patches.append(done)

    def _rebuild(self, slots: list[Any]) -> None:
        self.free = set(slots)
        self.seen = len(slots)

    def _length(self) -> int:
        try:
            return len(self.pool.free_slots)
        except Exception:
            return -2

    def _settle(self, before: int) -> None:
        """After a wrapped call: the set is current if the list had not moved unseen before it;
        else it is rebuilt from the list (O(rows), once per unseen change)."""
        if before != self.seen:
            self._rebuild(self.pool.free_slots)
        else:
            self.seen = len(self.pool.free_slots)

    def _hold(self, rows: list[Any], args: tuple[Any, ...]) -> None:
        """Note each row's request, where the call named the requests (one per row, in order)."""
        for reqs in args:  # (a plain loop: no generator made at every allocation)
            if isinstance(reqs, list) and reqs and not isinstance(reqs[0], int):
                if len(reqs) == len(rows):
                    self.holder.update(zip(map(int, rows), reqs, strict=True))
                return

    def _take(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def take(*args: Any, **kwargs: Any) -> Any:
            if self.depth:  # inside another wrapped call (0.5.23's alloc -> alloc_rows): it counts
                return original(*args, **kwargs)
            before = self._length()
            self.depth += 1
            try:
                out = original(*args, **kwargs)
            finally:
                self.depth -= 1
            try:
                if isinstance(out, list):
                    self.free.difference_update(out)
                    self._hold(out, args)
                self._settle(before)
            except Exception:  # never in SGLang's way: the next check rebuilds
                self.seen = -1
            return out

        return take

    def _give(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def give(freed: Any, *args: Any, **kwargs: Any) -> Any:
            if self.depth:  # 0.5.23's free(req) -> free_rows: the outer call counts
                return original(freed, *args, **kwargs)
            before = self._length()
            try:
                rows = rows_of(freed)
            except Exception:
                rows, before = [], -2
            self.depth += 1
            try:
                out = original(freed, *args, **kwargs)
            finally:
                self.depth -= 1
            try:
                self.free.update(rows)
                for row in rows:  # (a held row's holder only: a finished request is not kept alive)
                    self.holder.pop(row, None)
                self._settle(before)
                if self.given is not None:
                    self.given(rows)
            except Exception:
                self.seen = -1
            return out

        return give


class RowView:
    """How a tensor sits in ``req_to_token``: which row a one-row view reads (O(1), no read)."""

    def __init__(self, table: Any) -> None:
        self.root = table if table._base is None else table._base
        self.offset = int(table.storage_offset())
        self.stride, self.width = int(table.stride(0)), int(table.shape[1])

    def row(self, t: Any) -> int | None:
        """The row ``t`` is a 1-d view of, or ``None`` (another tensor, or a view over rows)."""
        at = self.at(t, t.numel())
        return None if at is None else at[0]

    def at(self, t: Any, n: int) -> tuple[int, int] | None:
        """``(row, first column)`` of ``t``, a 1-d view of ``n`` ids in one row, or ``None``."""
        if getattr(t, "_base", None) is not self.root:
            return None
        stride = t.stride()
        if len(stride) != 1 or (n > 1 and stride[0] != 1):
            return None
        row, col = divmod(t.storage_offset() - self.offset, self.stride)
        return (row, col) if col + n <= self.width else None

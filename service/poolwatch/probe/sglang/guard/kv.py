"""Guard v2 on the full KV and SWA pools: refuse a free through a released request row, and a direct
double free on the SWA pair's sides.

A KV free names up to thousands of slots, and in SGLang they live on the device: reading them to
the host at every free would synchronise the scheduler with the GPU on the healthy path.  So the
KV proofs read *where the freed tensor comes from*, not what it holds (O(1), no device read):

* **released row** (every family, every allocator): the freed tensor is a view of one
  ``req_to_token`` row (its storage, offset and stride say which row and columns) and that row is
  on the request pool's free list (:class:`~poolwatch.probe.sglang.guard.rows.RowBook`).  SGLang
  frees a request's KV through its row only while the row is held, so every id in the call is a
  stale pointer's (a second release of one request, a captured row used after the release): the
  call is refused whole, through whichever entry point it came (``free``, ``free_swa``, 0.5.23's
  ``free_full`` and ``*_segment`` frees; :data:`~poolwatch.probe.sglang.guard.paths.GUARD_PATHS`).
* **free** (the SWA pair's two sides, up to 0.5.12): a call of ``full_attn_allocator.free`` or
  ``swa_attn_allocator.free`` that does not come from the pair itself (no healthy path makes one
  there) is checked id by id: a page already on that side's free list, or twice in the call, is
  dropped and the rest freed -- the double free of a sliding-window page (#27789's class).  This
  check reads the ids and the free list (a device read), only on that path.

Calls nested in a wrapped one (the pair's ``free`` calling its ``free_swa`` and its sides) are
the outer call's and pass through.  Any other tensor (eviction's node values, speculative
decoding's rejected slots, a free group's concatenation) is freed as asked: not covered.
Cost on the healthy path: about five tensor attribute reads and a set lookup per free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.owners import TreePrefix
from poolwatch.probe.sglang.guard.patch import Patch, patch
from poolwatch.probe.sglang.guard.pending import Pending
from poolwatch.probe.sglang.guard.row_first import RowFirst
from poolwatch.probe.sglang.guard.rows import RowBook, RowView
from poolwatch.probe.sglang.guard.slots import Record, rid
from poolwatch.probe.sglang.guard.takes import Range, Takes, overlap

__all__ = ["KvGuard"]

log = logging.getLogger("poolwatch.probe")
_SIDES = (("full_attn_allocator", Pool.FULL), ("swa_attn_allocator", Pool.SWA))


_NOTHING = object()  # what a wrapped free frees instead of a released row's ids: nothing


class KvGuard:
    """The wrapped KV free paths of one rank (installed only in guard mode)."""

    def __init__(
        self,
        sched: Any,
        rows: RowBook,
        record: Record,
        paused: Callable[[], bool],
        prefix: TreePrefix | None = None,
        pending: Pending | None = None,
        takes: Takes | None = None,
    ) -> None:
        self.sched, self.rows, self.record, self.paused = sched, rows, record, paused
        self.prefix, self.pending, self.takes = prefix, pending, takes
        self.view: RowView | None = None
        self.patches: list[Patch] = []
        self.depth = 0  # wrapped calls in progress: a nested one is the outer call's
        self.row_first: RowFirst | None = None  # the row-first release's window (up to 0.5.6)

    def install(self, entries: tuple[tuple[str, Pool], ...], direct: bool, row_first: bool = False) -> bool:
        """Wrap the allocator's entry points (and, ``direct``, the SWA pair's sides); ``row_first``:
        the family's ``ChunkCache.cache_finished_req`` gives the row back before it frees the KV
        through it (up to 0.5.6), wrapped as that release's own window
        (:class:`~poolwatch.probe.sglang.guard.row_first.RowFirst`)."""
        alloc = getattr(self.sched, "token_to_kv_pool_allocator", None)
        table = getattr(getattr(self.sched, "req_to_token_pool", None), "req_to_token", None)
        if alloc is None or table is None or getattr(table, "dim", lambda: 0)() != 2:
            return False
        self.view = RowView(table)
        for name, pool in entries:
            self._add(patch(alloc, name, self._entry(name, pool)))
        for side, pool in _SIDES if direct else ():
            owner = getattr(alloc, side, None)
            if hasattr(owner, "free_pages") and hasattr(owner, "release_pages"):
                self._add(patch(owner, "free", self._direct(owner, side, pool)))
        tree = getattr(self.sched, "tree_cache", None)
        if self.patches and row_first and tree is not None and "ChunkCache" in type(tree).__name__:
            self.row_first = RowFirst(self.rows, self._page)
            self._add(patch(tree, "cache_finished_req", self.row_first.wrap))
        return bool(self.patches)

    def uninstall(self) -> None:
        for done in self.patches:
            done.undo()
        self.patches = []

    def _add(self, done: Patch | None) -> None:
        if done is not None:
            self.patches.append(done)

    def _entry(self, name: str, pool: Pool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        where = f"token_to_kv_pool_allocator.{name}"
        return self._wrap(partial(self._owned, pool, where))  # C-level: no extra frame

    def _wrap(self, instead: Callable[[Any], Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A free that asks ``instead(free_index)`` what to free: None, the call as it came; else the
        ids it returns (nothing at all when there are none).  Never re-entered (a free inside a
        free is SGLang's own), and as it came while guard is paused."""

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def free(free_index: Any, *args: Any, **kwargs: Any) -> Any:
                if self.depth or self.paused():
                    return original(free_index, *args, **kwargs)
                self.depth += 1
                try:
                    keep = instead(free_index)
                    if keep is None:
                        return original(free_index, *args, **kwargs)
                    if keep is _NOTHING or not int(keep.numel()):
                        return None
                    return original(keep, *args, **kwargs)
                finally:
                    self.depth -= 1

            return free

        return make

    def _owned(self, pool: Pool, where: str, free_index: Any) -> Any:
        """``None`` to free the call as it came, else what to free (``_NOTHING`` or the unowned
        part of the row view); refusals recorded.  Proofs, in order: released row, pending
        transfer, tree prefix (:mod:`~poolwatch.probe.sglang.guard.owners`) and the columns the
        tree took (:mod:`~poolwatch.probe.sglang.guard.takes`; also for a view of an insertion's
        value, the duplicates it frees)."""
        try:
            n = free_index.numel()
            at = self.view.at(free_index, n) if n and self.view is not None else None
            if at is None:
                return self._duplicates(free_index, n, pool, where)
            row, col = at
            first = self.row_first is not None and self.row_first.passes(row, col, n)
            if not first and self.rows.released(row):
                return self._refuse(free_index, [], pool, where)
            sender = self.pending.at_row(row) if self.pending is not None else None
            if sender is not None:
                return self._refuse(free_index, [f"{rid(sender)} (transfer pending)"], pool, where)
            req, owned = self.prefix.at_row(row) if self.prefix is not None else (None, 0)
            taken = self.takes.ranges(row, req) if req is not None and self.takes is not None else []
            if req is None or (not taken and col >= owned):  # (a release: its own columns, past the tree's)
                return None
            return self._cut(free_index, col, n, req, [(0, owned), *taken], pool, where)
        except Exception:  # never in SGLang's way: an unreadable call is freed as asked
            log.debug("poolwatch guard: KV free check failed", exc_info=True)
            return None

    def _duplicates(self, free_index: Any, n: int, pool: Pool, where: str) -> Any:
        """A view of the insertion's value in progress (the duplicates it frees): its columns the
        tree took from the request's row before are refused."""
        inside = self.takes.in_insert(free_index, n) if n and self.takes is not None else None
        if inside is None or self.takes is None:
            return None
        req, row, col = inside
        return self._cut(free_index, col, n, req, self.takes.ranges(row, req), pool, where)

    def _cut(
        self, free_index: Any, col: int, n: int, req: Any, owned: list[Range], pool: Pool, where: str
    ) -> Any:
        """The tree owns the ``owned`` columns of the row: the call's ``[col, col + n)`` in them is
        refused, the rest freed (``None``: none of it is the tree's)."""
        cuts = overlap(owned, col, n)
        if not cuts:
            return None
        keep, at = [], 0
        for a, b in cuts:
            if a > at:
                keep.append(free_index[at:a])
            self._refuse(free_index[a:b], [f"tree (prefix of {rid(req)})"], pool, where)
            at = b
        if at < n:
            keep.append(free_index[at:])
        if not keep:
            return _NOTHING
        import torch

        return keep[0] if len(keep) == 1 else torch.cat(keep)

    def _refuse(self, ids: Any, owners: list[str], pool: Pool, where: str) -> Any:
        page = self._page()
        freed = [int(i) for i in ids.reshape(-1).tolist()]
        shown = sorted({i // page for i in freed}) if page > 1 else freed
        self.record(pool, shown, owners, where, page)
        return _NOTHING

    def _page(self) -> int:
        page = getattr(getattr(self.sched, "token_to_kv_pool_allocator", None), "page_size", 1)
        return page if isinstance(page, int) and page > 1 else 1

    def _direct(self, side: Any, name: str, pool: Pool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        where = f"token_to_kv_pool_allocator.{name}.free"
        return self._wrap(lambda free_index: self._not_free(side, free_index, pool, where))

    def _not_free(self, side: Any, free_index: Any, pool: Pool, where: str) -> Any:
        """``None`` to free the call as it is, else what to free: the ids whose page is neither on
        this side's free list already nor earlier in the call (refusals recorded)."""
        try:
            if free_index.numel() == 0 or not getattr(side, "is_not_in_free_group", True):
                return None  # inside a free group nothing reaches the list now: no proof
            import torch

            page = int(getattr(side, "page_size", 1) or 1)
            ids = free_index.reshape(-1).tolist()
            on_list = set(torch.cat((side.free_pages, side.release_pages)).tolist())
        except Exception:
            log.debug("poolwatch guard: direct KV free check failed", exc_info=True)
            return None
        keep, refused, seen = [], [], set(on_list)
        for i in ids:
            unit = int(i) // page
            if unit in on_list or (page == 1 and unit in seen):
                refused.append(unit)
            else:
                keep.append(i)
                seen.add(unit)
        if not refused:
            return None
        self.record(pool, sorted(set(refused)), [], where, page)
        return torch.tensor(keep, dtype=free_index.dtype, device=free_index.device)

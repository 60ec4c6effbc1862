"""The columns of a held request row that the tree took as its own values at an insertion.

The tree's prefix proof (:mod:`~poolwatch.probe.sglang.guard.owners`) reads the request's
``cache_protected_len``, which the tree advances after it inserts the request's KV and matches it
again.  When that match comes back shorter than the insertion (0.5.17's unified tree with SWA +
EAGLE: the re-match refuses a leaf with less than a window of live SWA, S09), the tree holds the
row's slots while the request still believes them its own, and its next insertion frees them as
its *duplicates* -- ids the tree holds, freed as the request's.

So, on families that read it (:attr:`~poolwatch.probe.sglang.guard.paths.GuardPaths.takes`), each
insertion made by the tree's ``cache_unfinished_req`` / ``cache_finished_req`` of a request is
noted: the insertion's value is a copy of the request's row from column 0, and the tree kept
``[prefix_len, len(value))`` of it as new nodes (``InsertResult.prefix_len``: what it held
before).  Those columns are the tree's from then on, whatever ``cache_protected_len`` says: no
healthy path frees a slot of a row after the tree took it (the tree evicts its own nodes; a
healthy re-match covers them with the protected length).  A free through the row (a row view)
and a free of the insertion's own value (the duplicates an insertion frees, a view of the value)
are both read back to the row's columns, and the tree's are refused.  Forgotten when the row goes
back to the request pool.

Cost: per insertion of a request, two list appends and a length read; per free inside an
insertion, one identity check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Range", "Takes", "overlap"]

log = logging.getLogger("poolwatch.probe")
Range = tuple[int, int]  # [start, end) columns of a row


class Takes:
    """The rows' columns the tree took (``row -> (request, ranges)``), kept at its insertions."""

    def __init__(self, row_of: Callable[[Any], Any]) -> None:
        self.row_of = row_of  # the request's row (``req_pool_idx`` where the family keeps it)
        self.caching: list[Any] = []  # the requests whose cache_*_req is running (innermost last)
        self.inserting: list[Any] = []  # the values of the insertions in progress
        self.taken: dict[int, tuple[Any, list[Range]]] = {}

    def cache(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``cache_unfinished_req`` / ``cache_finished_req``: the request whose insertion follows."""

        def cache_req(req: Any, *args: Any, **kwargs: Any) -> Any:
            self.caching.append(req)
            try:
                return original(req, *args, **kwargs)
            finally:
                self.caching.pop()

        return cache_req

    def begin(self, params: Any) -> None:
        self.inserting.append(getattr(params, "value", None))

    def end(self, params: Any, result: Any) -> None:
        """After an insertion: the columns it kept of the request's row, noted."""
        self.inserting.pop()
        try:
            value, req = getattr(params, "value", None), self.caching[-1] if self.caching else None
            start, end = getattr(result, "prefix_len", None), int(value.numel()) if value is not None else 0
            row = self.row_of(req) if req is not None else None
            if not isinstance(row, int) or not isinstance(start, int) or start >= end:
                return
            held = self.taken.get(row)
            ranges = held[1] if held is not None and held[0] is req else []
            self.taken[row] = (req, [*ranges, (start, end)])
        except Exception:  # never in SGLang's way: a miss, not a refusal
            log.debug("poolwatch guard: tree insertion's columns unreadable", exc_info=True)

    def forget(self, rows: list[int]) -> None:
        for row in rows:
            self.taken.pop(row, None)

    def ranges(self, row: int, req: Any) -> list[Range]:
        """The columns of ``row`` the tree took while ``req`` held it (none for another holder)."""
        held = self.taken.get(row)
        return held[1] if held is not None and held[0] is req else []

    def in_insert(self, t: Any, n: int) -> tuple[Any, int, int] | None:
        """``(request, row, first column)`` when ``t`` is a 1-d view of ``n`` ids of the insertion in
        progress's value (a copy of the request's row from column 0), else ``None``."""
        if not self.inserting or not self.caching:
            return None
        value = self.inserting[-1]
        if value is None or (t is not value and getattr(t, "_base", None) is not value):
            return None
        stride = t.stride()
        if len(stride) != 1 or (n > 1 and stride[0] != 1) or value.dim() != 1:
            return None
        req = self.caching[-1]
        row = self.row_of(req)
        col = int(t.storage_offset()) - int(value.storage_offset())
        return (req, row, col) if isinstance(row, int) and col >= 0 else None


def overlap(owned: list[Range], col: int, n: int) -> list[Range]:
    """The parts of the columns ``[col, col + n)`` inside ``owned``, relative to ``col``, merged and
    in order."""
    end = col + n
    cuts = [(max(a, col) - col, min(b, end) - col) for a, b in owned if max(a, col) < min(b, end)]
    if len(cuts) < 2:  # (a release frees past the tree's columns: no cut, no sort -- every free)
        return cuts
    cuts.sort()
    merged: list[Range] = []
    for a, b in cuts:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged

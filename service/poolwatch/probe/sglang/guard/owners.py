"""Who owns a request's slots *at the free*: the tree's prefix of a held row (and, in
:mod:`~poolwatch.probe.sglang.guard.pending`, a pending PD transfer).

Guard v2's census-time proofs miss what changed since the last census; these two are read at the
free itself, from state SGLang keeps current (no census, no device read on the healthy path):

* **tree prefix** (every family with a prefix-sharing tree): the tree owns the first columns of a
  held request row -- ``[0, cache_protected_len)`` (``req.kv.cache_protected_len`` on 0.5.23,
  ``req.cache_protected_len`` from 0.5.6, ``req.last_matched_prefix_len`` before), the prefix the
  request matched or inserted and locked.  Every release path read frees a request's KV from
  that column on (the tree frees the prefix by evicting its own nodes, never through a row); a free
  through the row that starts below it frees slots the tree still owns -- S13's class (PD decode
  radix + offload freeing ``[0, kv_allocated_len)``, #27666).  The owned columns are refused, the
  rest freed.  The row's request comes from :attr:`RowBook.holder
  <poolwatch.probe.sglang.guard.rows.RowBook.holder>`, believed only while it still points at the
  row.  Off with a tree that shares nothing (``ChunkCache``, ``disable``): the prefix is the
  request's own there.
* **pending transfer** (a PD rank): :mod:`~poolwatch.probe.sglang.guard.pending`.

Cost per healthy free: a dict lookup and two attribute reads; see
``benchmarks/bench_guard.py --free-path --real``.
"""

from __future__ import annotations

import logging
from operator import attrgetter
from typing import Any

__all__ = ["TreePrefix", "shares_prefixes"]

log = logging.getLogger("poolwatch.probe")


def shares_prefixes(tree: Any) -> bool:
    """Whether the tree owns what a request matched (not a ``ChunkCache``, not disabled)."""
    if tree is None or getattr(tree, "disable", False) or "ChunkCache" in type(tree).__name__:
        return False
    sharing = getattr(tree, "supports_prefix_sharing", None)
    return bool(sharing()) if callable(sharing) else True


def _length(value: Any) -> int:
    """A protected length: an int (``cache_protected_len``), or ids whose count it is (a 1-d
    tensor, whose ``numel`` is much cheaper than ``len``, or a list)."""
    kind = type(value)
    if kind is int:
        return value  # type: ignore[no-any-return]
    if value is None:
        return 0
    return len(value) if kind is list or kind is tuple else int(value.numel())


class TreePrefix:
    """The tree's owned columns of a held row, read from the row's request at the free."""

    def __init__(self, sched: Any, holder: dict[int, Any], protected: tuple[str, ...]) -> None:
        self.holder = holder
        on = shares_prefixes(getattr(sched, "tree_cache", None)) and bool(protected)
        self.protected = attrgetter(".".join(protected)) if on else None
        self.row = attrgetter(".".join((*protected[:-1], "req_pool_idx")))  # where the row is kept

    def at_row(self, row: int) -> tuple[Any, int]:
        """``(the request holding row now, the columns the tree owns of it)``; ``(None, 0)``."""
        req = self.holder.get(row)
        if req is None:
            return None, 0
        try:
            if self.row(req) != row:
                return None, 0
            value: Any = self.protected(req) if self.protected is not None else 0
        except AttributeError:
            return req, 0
        return req, _length(value)

    def request(self, row: int) -> Any:
        """The request holding ``row`` now, or ``None`` (unknown, or the row changed hands)."""
        req = self.holder.get(row)
        if req is None:
            return None
        try:
            return req if self.row(req) == row else None
        except AttributeError:
            return None

    def owned(self, req: Any) -> int:
        """How many leading columns of ``req``'s row the tree owns (0: none, or no proof)."""
        if self.protected is None:
            return 0
        try:
            value = self.protected(req)
        except AttributeError:
            return 0
        return _length(value)

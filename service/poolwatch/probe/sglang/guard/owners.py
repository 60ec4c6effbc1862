"""Who owns a request's slots *at the free*: the tree's prefix of a held row, and a pending PD transfer.

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
* **pending transfer** (a PD prefill rank): a request on ``disagg_prefill_inflight_queue`` has its
  KV and Mamba state read by the transfer engine until SGLang polls it done or failed and releases
  it, inside ``process_disagg_prefill_inflight_queue`` (or ``handle_inflight_transfer_failure``).
  Both are wrapped on the instance as SGLang's own window; outside it, a free through such a
  request's row, or of its Mamba slot, is refused whole (S20 / S21's class: a release while the
  transfer still reads the slots), and the real release later frees them once.  The queue's
  requests are indexed once per queue change (the list is replaced each loop turn), not per free.

Cost per healthy free: a dict lookup and two attribute reads (tree prefix), a length and identity
read of the queue (pending); see ``benchmarks/bench_guard.py --free-path --real``.
"""

from __future__ import annotations

import logging
from operator import attrgetter
from typing import Any

from poolwatch.probe.sglang.guard.patch import Depth, Patch, patch

__all__ = ["Pending", "TreePrefix", "shares_prefixes"]

log = logging.getLogger("poolwatch.probe")
_WINDOW = ("process_disagg_prefill_inflight_queue", "handle_inflight_transfer_failure")


def _path(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
    return obj


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


class Pending:
    """Requests whose PD transfer is pending (a prefill rank's inflight queue), outside SGLang's
    own processing of the queue; their rows and Mamba slots (installed only in guard mode)."""

    def __init__(self, sched: Any, slot: tuple[str, ...]) -> None:
        self.sched, self.slot = sched, slot
        self.depth = Depth()  # SGLang's own window in progress
        self.patches: list[Patch] = []
        self.seen: tuple[int, int] = (0, -1)  # the queue list's identity and length indexed
        self.reqs: dict[int, Any] = {}  # id(req) -> req
        self.slots: dict[int, Any] | None = None  # Mamba slot -> req (built on a Mamba free)

    def install(self) -> bool:
        """On a rank with an inflight queue: wrap SGLang's window; False without a queue."""
        if not isinstance(getattr(self.sched, "disagg_prefill_inflight_queue", None), list):
            return False
        for name in _WINDOW:
            done = patch(self.sched, name, self.depth.wrap)
            if done is not None:
                self.patches.append(done)
        return True

    def uninstall(self) -> None:
        for done in self.patches:
            done.undo()
        self.patches = []

    def active(self) -> bool:
        """Index the queue if it changed; False when nothing is pending (or inside the window)."""
        queue = getattr(self.sched, "disagg_prefill_inflight_queue", None)
        if self.depth or not queue:
            return False
        key = (id(queue), len(queue))
        if key != self.seen:
            self.reqs = {id(r): r for r in queue}
            self.slots, self.seen = None, key
        return True

    def holds(self, req: Any) -> bool:
        """Whether ``req``'s transfer is pending (exact: its identity on the queue)."""
        return req is not None and self.active() and id(req) in self.reqs

    def slot_map(self) -> dict[int, Any]:
        """``{Mamba working slot: its pending request}`` (empty when nothing is pending)."""
        if not self.active():
            return {}
        if self.slots is None:
            self.slots = {}
            for req in self.reqs.values():
                tensor = _path(req, self.slot)
                if tensor is not None and int(tensor.numel()) == 1:
                    self.slots[int(tensor.reshape(-1)[0])] = req
        return self.slots

"""Who may hold something outside the prefix tree: the live requests of one rank.

At a loop boundary (reference §3.2-§3.3) a request can hold a request row, private full-KV slots
and Mamba slots (what each one holds is :mod:`poolwatch.probe.sglang.footprint`).  The holders are
collected from every place SGLang keeps them, deduplicated by identity.  Waiting requests hold no
row and no KV, but may hold a copy-on-write Mamba slot taken while they were considered for
scheduling.

Cost: O(live requests) with ``len()`` only; no tensor contents are read.  The holders are
deduplicated at C speed (``dict(zip(map(id, ...)))``), and kept from the last sample while every
list they came from holds the same requests.  The waiting queue is not walked on the cheap path:
on a model without a Mamba pool it holds nothing and is not read at all (its length comes from
``len()``); on a Mamba model the few requests holding a copy-on-write slot are recalled from the
last exact scan (:mod:`poolwatch.probe.sglang.waiting`, which says when the scan runs and why no false
gap follows).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.sessions import Parked, parked_sessions
from poolwatch.probe.sglang.shapes import Shape
from poolwatch.probe.sglang.totals import Memo, same_items
from poolwatch.probe.sglang.waiting import WaitingHolders, maybe_holding

__all__ = ["LiveSet", "collect_live", "role_of"]


@dataclass(frozen=True, slots=True)
class LiveSet:
    holders: tuple[Any, ...]  # may hold rows, KV and Mamba slots
    waiting: tuple[Any, ...]  # may hold a copy-on-write Mamba slot only
    chunked: Any  # the scheduler's chunked_req (or None)
    chunk_ran: bool = True  # the chunked request is in last_batch (its chunk just ran)
    waiting_exact: bool = True  # False: ``waiting`` was recalled from the last exact scan
    sessions: Parked = ()  # streaming-session slots holding what no live request runs on
    ids: Sequence[int] | None = None  # id() of each holder, in order (None: not collected)
    members: AbstractSet[int] | None = None  # the same ids, as a set


def role_of(sched: Any, reading: Reading) -> str:
    """``prefill`` / ``decode`` / ``null`` from ``disaggregation_mode`` (an enum or a string)."""
    mode = reading.attr(sched, "disaggregation_mode", optional=True)
    value = getattr(mode, "value", mode)
    return value if isinstance(value, str) else "null"


def _reqs_of(batch: Any) -> list[Any]:
    if batch is None or batch is MISSING:
        return []
    return list(batch.reqs)


def _holder_groups(sched: Any, reading: Reading, role: str) -> Iterator[Iterable[Any]]:
    last_batch = reading.attr(sched, "last_batch")
    yield reading.guard("last_batch.reqs", lambda: _reqs_of(last_batch), [])
    running = reading.attr(sched, "running_batch")
    if running is last_batch and running is not MISSING and running is not None:
        yield []  # a decode step: the batch that just ran is the running batch, its requests are in
    else:
        yield reading.guard("running_batch.reqs", lambda: _reqs_of(running), [])
    queue = reading.attr(sched, "result_queue", optional=True)
    if queue is not MISSING and queue is not None:
        yield reading.guard(
            "result_queue", lambda: [r for item in list(queue) for r in _reqs_of(item[0])], []
        )
    if role == "prefill":
        yield reading.guard(
            "disagg_prefill_inflight_queue", lambda: list(sched.disagg_prefill_inflight_queue), []
        )
    if role == "decode":
        transfer = reading.attr(sched, "disagg_decode_transfer_queue.queue")
        if transfer is not MISSING:
            yield reading.guard("disagg_decode_transfer_queue", lambda: [d.req for d in transfer], [])
        yield reading.guard("waiting_queue", lambda: list(sched.waiting_queue), [])


def _same(a: Any, b: Any) -> bool:
    """Whether two request lists hold the same requests in the same order (identity, C speed)."""
    return isinstance(a, list) and isinstance(b, list) and same_items(a, b)


def collect_live(
    sched: Any,
    reading: Reading,
    role: str,
    *,
    shape: Shape | None = None,
    mamba: bool = True,
    tracker: WaitingHolders | None = None,
    exact_waiting: bool = True,
    memo: Memo | None = None,
) -> LiveSet:
    """Every request that may hold something, deduplicated by identity, in a stable order.

    Waiting requests (not PD decode, where the waiting queue holds rows and KV) hold at most a
    copy-on-write Mamba slot: none on a model without a Mamba pool (``mamba=False``: the queue
    is not read), and with ``shape`` only those the release marks as holding one are kept.  With
    a ``tracker`` and ``exact_waiting=False`` a long queue is not walked: its holders are recalled
    from the tracker's last exact scan (``LiveSet.waiting_exact`` is then False).  ``memo`` keeps
    the deduplicated holders while every list they came from holds the same requests."""
    chunked = reading.attr(sched, "chunked_req")
    chunked = None if chunked is MISSING else chunked
    tail = [] if chunked is None else [chunked]
    groups: list[Iterable[Any]] = [*_holder_groups(sched, reading, role), tail]
    last, running = groups[0], groups[1]  # last_batch.reqs, running_batch.reqs (lists)
    if _same(last, running):  # a decode step: the running batch is the batch that just ran
        groups[1] = []
    members, holders, ids = _unique(groups, memo)
    chunk_ran = chunked is None or any(map(operator.is_, last, itertools.repeat(chunked)))
    found: list[Any] = []
    exact = True
    if role != "decode" and mamba:
        queue: Any = reading.guard("waiting_queue", lambda: sched.waiting_queue, [])
        found, exact = _waiting_holders(queue, shape, tracker, exact_waiting)
    waiting = tuple(r for r in found if id(r) not in members)
    sessions = _sessions(sched, reading, holders) if shape is None or shape.has_session_held else ()
    return LiveSet(holders, waiting, chunked, chunk_ran, exact, sessions, ids, members)


def _sessions(sched: Any, reading: Reading, holders: tuple[Any, ...]) -> Parked:
    tree = reading.attr(sched, "tree_cache", optional=True)
    if tree is MISSING or tree is None:
        return ()
    return reading.guard("sessions", lambda: parked_sessions(tree, holders), ())


def _unique(groups: list[Any], memo: Memo | None) -> tuple[set[int], tuple[Any, ...], list[int]]:
    """The ids of the requests of ``groups``, the requests by identity, first occurrence first, as a
    tuple, and their ids in that order; the last sample's (the very same tuple, so the totals know
    them unchanged in O(1)) when every group holds the very same requests (identity, C speed)."""
    last = None if memo is None else memo.groups
    if last is not None and len(last[0]) == len(groups) and all(map(_same, groups, last[0])):
        return last[1], last[2], last[3]
    filled = [g for g in groups if g]
    one = len(filled) == 1 and isinstance(filled[0], list)  # a decode step: a fresh copy of one batch's list
    combined = filled[0] if one else list(itertools.chain.from_iterable(filled))
    ids = list(map(id, combined))
    members = set(ids)
    if len(members) == len(ids):  # no request in two places (a decode step: one list)
        holders = tuple(combined)
    else:
        unique = dict(zip(ids, combined, strict=True))
        holders, ids = tuple(unique.values()), list(unique)
    if memo is not None:
        memo.groups = (groups, members, holders, ids)
    return members, holders, ids


def _waiting_holders(
    queue: Any, shape: Shape | None, tracker: WaitingHolders | None, exact: bool
) -> tuple[list[Any], bool]:
    """``(waiting holders, exact)``: scanned, or recalled from the tracker's last scan."""
    if tracker is None:
        return maybe_holding(queue, shape), True
    if exact or not tracker.scanned or len(queue) < tracker.exact_below:
        return tracker.scan(queue, shape), True
    return tracker.recall(), False

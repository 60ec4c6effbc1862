"""What waits on an SGLang scheduler, and whether it moves: the PD requests that keep KV while a
transfer is pending, and the scheduler's progress since the last read (scheduler thread).

Owners of a hold (:mod:`poolwatch.probe.core.waiting`), full-KV slots each:

* ``kv_send``: a prefill rank's ``disagg_prefill_inflight_queue`` -- requests whose prefill is done,
  kept with their row and KV until the sender reports the decode side has read it (an aborted one
  too, named so: up to 0.5.19 a request aborted while its last chunk ran is still enqueued and sent,
  SGLang PR #36988).  SGLang bounds the
  wait on the far side: a decode aborts a request whose KV has not landed within
  ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` after bootstrapping (``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``),
  the sum the sender's deferred bootstrap uses (0.5.23); a send older than both has no decode left
  waiting for it;
* ``kv_recv``: a decode rank's ``disagg_decode_transfer_queue`` -- requests whose KV is allocated and
  not yet landed, bounded by ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` (300 s by default, read from the
  environment as SGLang reads it; the same name on every release the probe reads).

* ``tree_lock``: HiCache's ``ongoing_write_through`` / ``ongoing_load_back`` -- prefix-tree nodes locked
  until the cache controller acknowledges their host copy (each a node, its device slots); SGLang has
  no bound on this wait (the sidecar's default applies).  On 0.5.9 and older a decode-only phase never
  drains write-through acknowledgements (SGLang PR #20049): the locks, counted ``protected``, stay.

A transfer hold's slots are all the columns each owner lists (:func:`~poolwatch.probe.sglang.footprint.
full_private_range`'s end): its private slots and the prefix it keeps locked in the tree (a prefill
caches its prompt there before sending, so most of what it keeps is locked, not private); a prefix two
owners share counts for each, as vLLM's block lists do.  Read once per owner (what an owner holds
does not change while it waits).  Both queues are short (the requests in flight
between two workers) and already walked by the sample's live set: no extra walk.

Progress: ``forward_ct`` (SGLang's count of forward passes; O(1)) moved, or, where it is absent, the
live holders changed (identity, C speed; the sample's memo hands back the very same tuple when they
did not) or their output lengths grew.  Admitted: holders not in the last read's.  Admittable waiting:
``waiting_queue``'s length (on a decode rank it holds requests whose KV has landed); its first few
requests are read once per stall, to name them (never a walk of the queue).  SGLang's retractions are
not observed here (``preemptions_seen`` False).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from poolwatch.model.holds import HoldReason
from poolwatch.model.rank import Pool
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.core.waiting import Moves, Owner, Waits
from poolwatch.probe.sglang.footprint import full_private_range
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.shapes import Shape

__all__ = ["SglangWaits", "pd_timeouts"]

WAITING = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
BOOTSTRAP = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
_DEFAULT = 300.0  # both, on every release read (0.5.4.post1's mooncake conn, 0.5.9 and 0.5.23's environ)
MAX_HEAD = 8


def _seconds(environ: Mapping[str, str], name: str) -> float:
    try:
        value = float(environ.get(name, "") or _DEFAULT)
    except ValueError:
        return _DEFAULT
    return value if value > 0 else _DEFAULT


def pd_timeouts(environ: Mapping[str, str]) -> dict[HoldReason, tuple[float, str]]:
    """SGLang's own bounds on a PD transfer's waits, as its environment sets them."""
    waiting, bootstrap = _seconds(environ, WAITING), _seconds(environ, BOOTSTRAP)
    return {
        HoldReason.KV_RECV: (waiting, WAITING),
        HoldReason.KV_SEND: (waiting + bootstrap, f"{WAITING} + {BOOTSTRAP}"),
    }


class SglangWaits:
    """One scheduler's transfer owners and progress, kept from read to read."""

    def __init__(self, scheduler: Any, shape: Shape, environ: Mapping[str, str]) -> None:
        self.sched, self.shape = scheduler, shape
        self.timeouts = pd_timeouts(environ)
        self._forward: int | None = None
        self._holders: tuple[Any, ...] | None = None
        self._ids: AbstractSet[int] = set()
        self._tokens = -1
        self._head: tuple[str, ...] | None = None  # the stalled queue's head, read once per stall
        self._owned: dict[int, tuple[Any, Owner]] = {}  # transfer owners by identity, as first read

    def read(self, role: str, live: LiveSet, page: int, reading: Reading) -> Waits:
        """The owners and the moves, each read on its own (a failure of one is noted, the other counts)."""
        none: tuple[Owner, ...] = ()
        owners = reading.guard("waits.owners", lambda: self._owners(role, live, page, reading), none)
        moves = reading.guard("waits.moves", lambda: self._moves(live), None)
        return Waits(owners, self.timeouts, moves)

    def _owners(self, role: str, live: LiveSet, page: int, reading: Reading) -> tuple[Owner, ...]:
        return (*self._transfers(role, live, page, reading), *self._tree_locks(reading))

    def _tree_locks(self, reading: Reading) -> list[Owner]:
        """HiCache nodes locked while a host copy is in flight (write-through, load-back): each a
        locked node, its device slots; an entry that is not a locked node (0.5.23's records, a
        write-back copy of an unlocked node) holds nothing here."""
        tree = reading.attr(self.sched, "tree_cache", optional=True)
        out: list[Owner] = []
        for name in ("ongoing_write_through", "ongoing_load_back"):
            ongoing = getattr(tree, name, None)
            if not ongoing or not isinstance(ongoing, dict):
                continue
            for node_id, node in list(ongoing.items()):
                value = getattr(node, "value", None)
                if value is not None and _locked(node):
                    out.append(Owner(Pool.FULL, HoldReason.TREE_LOCK, f"node {node_id}", len(value)))
        return out

    def _transfers(self, role: str, live: LiveSet, page: int, reading: Reading) -> tuple[Owner, ...]:
        if role == "prefill":
            queue = reading.attr(self.sched, "disagg_prefill_inflight_queue", optional=True)
            reqs = [] if queue is MISSING or queue is None else list(queue)
            reason = HoldReason.KV_SEND
        elif role == "decode":
            queue = reading.attr(self.sched, "disagg_decode_transfer_queue.queue", optional=True)
            reqs = [] if queue is MISSING or queue is None else [d.req for d in list(queue)]
            reason = HoldReason.KV_RECV
        else:
            return ()
        if not reqs:
            self._owned = {}
            return ()
        last, owned = self._owned, {}
        for r in reqs:  # an owner waiting keeps what it holds: counted once, when first seen
            key = id(r)
            kept = last.get(key)
            owner = kept[1] if kept is not None and kept[0] is r else self._owner(r, reason, page, live)
            if not owner.aborted and _aborted(r):  # an abort may come while it waits
                owner = replace(owner, aborted=True)
            owned[key] = (r, owner)
        self._owned = owned
        return tuple(o for _, o in owned.values())

    def _owner(self, req: Any, reason: HoldReason, page: int, live: LiveSet) -> Owner:
        span = full_private_range(req, self.shape, page, live)
        slots = 0 if span is None else max(0, span[2])  # its private columns and the prefix it locks
        return Owner(Pool.FULL, reason, str(req.rid), slots, _aborted(req))

    def _moves(self, live: LiveSet) -> Moves:
        holders = live.holders
        forward = getattr(self.sched, "forward_ct", None)
        changed = holders is not self._holders
        admitted = 0
        if changed:
            ids = set(map(id, holders)) if live.members is None else live.members
            admitted = len(ids - self._ids) if self._holders is not None else 0
            self._ids = ids
        if isinstance(forward, int):
            progressed = self._forward is None or forward != self._forward
            self._forward = forward
        else:
            tokens = sum(len(getattr(r, "output_ids", ())) for r in holders)
            progressed = self._holders is None or admitted > 0 or tokens != self._tokens
            self._tokens = tokens
        self._holders = holders
        queue = getattr(self.sched, "waiting_queue", ())
        waiting = len(queue)
        if progressed or not waiting:
            self._head = None
        elif self._head is None:  # the first read of a stall: the first few waiting, once
            self._head = tuple(str(r.rid) for r in itertools.islice(iter(queue), MAX_HEAD))
        return Moves(progressed, admitted, waiting, self._head or (), preemptions_seen=False)


def _locked(node: Any) -> bool:
    """Whether a tree node is locked: ``lock_ref`` (RadixCache), ``full_lock_ref`` (the hybrid trees)."""
    lock = getattr(node, "lock_ref", None)
    if lock is None:
        lock = getattr(node, "full_lock_ref", 0)
    return isinstance(lock, int) and lock > 0


def _aborted(req: Any) -> bool:
    """``req`` carries an abort: SGLang's ``FINISH_ABORT`` as its finish (``finished_reason``) or as
    the finish the next step applies (``to_finish``, what ``abort_request`` sets on a request whose
    step is in flight: a PD prefill up to 0.5.19 still enqueues it for its KV send)."""
    return any(
        type(getattr(req, name, None)).__name__ == "FINISH_ABORT" for name in ("finished_reason", "to_finish")
    )

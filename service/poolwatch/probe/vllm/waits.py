"""What waits on a vLLM scheduler, and whether it moves: the requests that keep blocks while a KV
transfer is pending, and the scheduler's progress since the last read (EngineCore thread).

Owners of a hold (:mod:`poolwatch.probe.core.waiting`):

* ``kv_send``: a finished request vLLM keeps in ``requests`` because its connector delays the free
  (``request_finished`` answered ``delay_free``) until it reports the KV sent -- a prefill's request
  awaiting the decode's read, a KV offload store;
* ``kv_recv``: a request in ``WAITING_FOR_REMOTE_KVS`` (its blocks allocated, the remote KV not yet
  landed), and one aborted while in it, which vLLM keeps until the worker reports it received (0.34's
  ``_aborted_kv_loads``; before, a kept request the probe saw receiving).

Both are found incrementally: a finished request is noticed in ``finished_req_ids`` at the update
hook (O(requests finished in the step)) and kept while ``requests`` still has it; vLLM's own count
of kept requests (``requests`` beyond every queue, as its ``has_finished_requests`` counts them)
rescans ``requests`` only when the two disagree.  A receiving request is looked for where blocked
requests wait: ``deferred_waiting`` (0.31+), ``skipped_waiting`` (0.18 - 0.30), ``waiting`` (up to
0.17, on a rank with a connector).  A hold's blocks are what its owners list (a block two owners
share counts for each).

Progress: the running list compared with the last read's by identity (C speed), the tokens computed
(``num_computed_tokens`` summed at C speed), the requests finished since (counted at the update
hook) and the preemptions seen inside ``schedule`` (a manager popping a *running* request's list:
:meth:`VllmWaits.popped`).  A preemption is fruitless when its victim's blocks are fenced by a step
still in flight (``defer_block_free`` and ``last_sched_seq`` beyond ``processed_step_seq``, 0.24+),
so it frees nothing at once.  Requests waiting in a blocked status (remote KV, a grammar, a streamed
input) are not admittable: counted off ``deferred_waiting`` (0.31+), found in ``skipped_waiting``
(0.18 - 0.30), and on older releases counted in ``waiting`` only while nothing moves (the one read
where it matters: a stall).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from poolwatch.model.holds import HoldReason
from poolwatch.model.rank import Pool
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.waiting import Moves, Owner, Waits
from poolwatch.probe.vllm.shapes import VllmShape
from poolwatch.probe.vllm.timeouts import connector_timeouts

__all__ = ["VllmWaits"]

_NCT = operator.attrgetter("num_computed_tokens")
_NULL = operator.attrgetter("is_null")
_BLOCKED = ("WAITING_FOR_REMOTE_KVS", "WAITING_FOR_FSM", "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR",
            "WAITING_FOR_STREAMING_REQ")  # fmt: skip
MAX_HEAD = 8


def _member(status: Any, name: str) -> Any:
    return getattr(type(status), name, None)


class VllmWaits:
    """One scheduler's transfer owners and progress, kept from read to read."""

    def __init__(self, scheduler: Any, shape: VllmShape, environ: Mapping[str, str]) -> None:
        self.sched, self.shape = scheduler, shape
        self.timeouts = connector_timeouts(scheduler, environ)
        self.kept: dict[str, Any] = {}  # finished requests vLLM still keeps (rid -> request)
        self._receiving: set[str] = set()  # seen WAITING_FOR_REMOTE_KVS at a read
        self._step_finished: set[str] = set()
        self._step_preempted: set[str] = set()
        self._finished = 0  # requests finished since the last read
        self._preempted: list[tuple[str, bool]] = []
        self._running: list[Any] | None = None  # the last read's running list (a copy)
        self._ncts: dict[int, int] = {}
        self._tokens = -1
        self._blocked_waiting = 0  # blocked requests in ``waiting`` at the last look (<= 0.17)
        self._status: Any = None  # the request status enum, learnt from the first request seen

    # -- between reads (hooks) ---------------------------------------------------------------------

    def step_begins(self) -> None:
        """Before ``schedule``: it clears ``finished_req_ids``."""
        self._step_finished.clear()
        self._step_preempted.clear()

    def step_ended(self) -> None:
        """After ``update_from_output``/``finish_requests``: the requests finished meanwhile, and
        those vLLM keeps for a transfer."""
        finished = getattr(self.sched, "finished_req_ids", None)
        if not finished:
            return
        new = finished - self._step_finished if isinstance(finished, set) else set(finished)
        if not new:
            return
        self._step_finished |= new
        self._finished += len(new)
        requests = self.sched.requests
        for rid in new:
            request = requests.get(rid)
            if request is not None:
                self.kept[rid] = request

    def receiving(self) -> set[str]:
        """The requests seen waiting for remote KV at a read (kept once finished, while vLLM keeps them)."""
        return self._receiving

    def popped(self, rid: str) -> None:
        """A manager pops ``rid``'s list: a preemption when the request still runs."""
        request = self.sched.requests.get(rid)
        status = getattr(request, "status", None)
        if status is None or status is not _member(status, "RUNNING") or rid in self._step_preempted:
            return
        self._step_preempted.add(rid)
        sched = self.sched
        fenced = bool(getattr(sched, "defer_block_free", False)) and getattr(
            request, "last_sched_seq", -1
        ) > getattr(sched, "processed_step_seq", 1 << 62)
        self._preempted.append((rid, fenced))

    # -- the read ----------------------------------------------------------------------------------

    def read(self, queues: Mapping[str, int], mgrs: tuple[Any, ...], reading: Reading) -> Waits:
        """The owners and the moves, each read on its own (a failure of one is noted, the other
        still counts)."""
        requests: Mapping[str, Any] = getattr(self.sched, "requests", {})
        in_queues = sum(queues.get(q, 0) for q in self.shape.queues)
        none: tuple[Owner, ...] = ()
        owners = reading.guard("waits.owners", lambda: self._owners(requests, in_queues, mgrs), none)
        moves = reading.guard("waits.moves", lambda: self._moves(queues), None)
        parked = bool(requests) and in_queues == 0
        return Waits(owners, self.timeouts, moves, parked)

    def _owners(
        self, requests: Mapping[str, Any], in_queues: int, mgrs: tuple[Any, ...]
    ) -> tuple[Owner, ...]:
        self._prune(requests, len(requests) - in_queues)
        receiving = self._receivers()
        owners = [self._kept_owner(rid, r, mgrs) for rid, r in self.kept.items()]
        owners += [Owner(Pool.FULL, HoldReason.KV_RECV, rid, _listed(mgrs, rid)) for rid in receiving]
        self._receiving = set(receiving) | (self._receiving & self.kept.keys())
        return tuple(owners)

    def _prune(self, requests: Mapping[str, Any], expected: int) -> None:
        kept = self.kept
        for rid in [rid for rid, r in kept.items() if requests.get(rid) is not r]:
            del kept[rid]
        if expected > len(kept):  # kept requests the hooks did not see (attached late): look once
            for rid, r in list(requests.items()):
                if rid not in kept and _finished(r):
                    kept[rid] = r

    def _kept_owner(self, rid: str, request: Any, mgrs: tuple[Any, ...]) -> Owner:
        aborted_loads = getattr(self.sched, "_aborted_kv_loads", ())
        receiving = rid in aborted_loads or rid in self._receiving
        status = getattr(request, "status", None)
        aborted = status is not None and status is _member(status, "FINISHED_ABORTED")
        reason = HoldReason.KV_RECV if receiving else HoldReason.KV_SEND
        return Owner(Pool.FULL, reason, rid, _listed(mgrs, rid), aborted)

    def _blocked_places(self) -> Iterable[Any]:
        """Where the blocked requests wait in this family."""
        sched = self.sched
        for name in ("deferred_waiting", "skipped_waiting"):
            place: Iterable[Any] | None = getattr(sched, name, None)
            if place is not None:
                return place
        waiting: Iterable[Any] = getattr(sched, "waiting", ())
        return waiting if getattr(sched, "connector", None) is not None else ()

    def _receivers(self) -> list[str]:
        found = []
        for request in list(self._blocked_places()):
            status = getattr(request, "status", None)
            if status is not None and status is _member(status, "WAITING_FOR_REMOTE_KVS"):
                found.append(request.request_id)
        return found

    def _moves(self, queues: Mapping[str, int]) -> Moves:
        running = list(getattr(self.sched, "running", ()))
        ncts = list(map(_NCT, running))
        tokens = sum(ncts)
        last = self._running
        same = last is not None and len(last) == len(running) and all(map(operator.is_, last, running))
        admitted, progressed = 0, self._finished > 0
        now: dict[int, int] | None = None
        if last is None:
            progressed = True  # the first read: nothing to compare with
        elif same:
            progressed = progressed or tokens != self._tokens
        else:
            now = dict(zip(map(id, running), ncts, strict=True))
            before = self._ncts
            admitted = len(now.keys() - before.keys())
            # (admitted: progress already; else the first request found grown ends the look)
            progressed = (
                progressed or admitted > 0 or any(now[i] > before[i] for i in now.keys() & before.keys())
            )
        if not same or tokens != self._tokens:  # each running request's count, for the next compare
            self._ncts = dict(zip(map(id, running), ncts, strict=True)) if now is None else now
        self._running, self._tokens, self._finished = running, tokens, 0
        preempted, self._preempted = tuple(self._preempted), []
        waiting = sum(v for q, v in queues.items() if q in self.shape.queues and q != "running")
        admittable = max(0, waiting - self._blocked(progressed))
        head = self._head() if admittable and not progressed else ()
        return Moves(progressed, admitted, admittable, head, preempted)

    def _blocked(self, progressed: bool) -> int:
        """Waiting requests in a blocked status (never admittable as they are)."""
        sched = self.sched
        deferred = getattr(sched, "deferred_waiting", None)
        if deferred is not None:
            return len(deferred)
        place: Iterable[Any] | None = getattr(sched, "skipped_waiting", None)
        if place is None:  # up to 0.17: blocked requests stay in ``waiting``; counted when it matters
            if progressed:
                return self._blocked_waiting
            place = getattr(sched, "waiting", ())
        statuses = [getattr(r, "status", None) for r in list(place or ())]
        count = sum(1 for s in statuses if s is not None and s.name in _BLOCKED)
        if getattr(sched, "skipped_waiting", None) is None:
            self._blocked_waiting = count
        return count

    def _head(self) -> tuple[str, ...]:
        waiting = getattr(self.sched, "waiting", ())
        return tuple(r.request_id for r in itertools.islice(iter(waiting), MAX_HEAD))


def _finished(request: Any) -> bool:
    try:
        return request.is_finished() is True
    except Exception:
        return False


def _listed(mgrs: tuple[Any, ...], rid: str) -> int:
    """The blocks ``rid`` lists across the managers (the null block that pads a window left out)."""
    total = 0
    for mgr in mgrs:
        lists = getattr(mgr, "req_to_blocks", None)
        blocks = lists.get(rid) if lists is not None else None
        if blocks:
            total += sum(map(operator.not_, map(_NULL, blocks)))
    return total

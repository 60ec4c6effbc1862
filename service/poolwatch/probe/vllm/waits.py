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

What the scheduler did since the last read (its progress) is :mod:`~poolwatch.probe.vllm.progress`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

from poolwatch.model.holds import HoldReason
from poolwatch.model.rank import Pool
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.waiting import Owner, Waits
from poolwatch.probe.vllm.progress import VllmProgress, member
from poolwatch.probe.vllm.shapes import VllmShape
from poolwatch.probe.vllm.timeouts import connector_timeouts

__all__ = ["VllmWaits"]

_NULL = operator.attrgetter("is_null")


class VllmWaits:
    """One scheduler's transfer owners and progress, kept from read to read."""

    def __init__(self, scheduler: Any, shape: VllmShape, environ: Mapping[str, str]) -> None:
        self.sched, self.shape = scheduler, shape
        self.timeouts = connector_timeouts(scheduler, environ)
        self.kept: dict[str, Any] = {}  # finished requests vLLM still keeps (rid -> request)
        self._receiving: set[str] = set()  # seen WAITING_FOR_REMOTE_KVS at a read
        self._step_finished: set[str] = set()
        self.moves = VllmProgress(scheduler, shape)  # what it did since the last read

    # -- between reads (hooks) ---------------------------------------------------------------------

    def step_begins(self) -> None:
        """Before ``schedule``: it clears ``finished_req_ids``."""
        if self._step_finished:
            self._step_finished.clear()
        if self.moves.step_preempted:
            self.moves.step_preempted.clear()

    def step_ended(self) -> bool:
        """After ``update_from_output``/``finish_requests``: the requests finished meanwhile, and
        those vLLM keeps for a transfer; whether any was new (:meth:`step_begins` then has to clear)."""
        finished = getattr(self.sched, "finished_req_ids", None)
        if not finished:
            return False
        new = finished - self._step_finished if isinstance(finished, set) else set(finished)
        if not new:
            return False
        self._step_finished |= new
        self.moves.finished += len(new)
        requests = self.sched.requests
        for rid in new:
            request = requests.get(rid)
            if request is not None:
                self.kept[rid] = request
        return True

    def parked_now(self, requests: Any) -> bool:
        """Nothing to step, requests left: every one kept for a transfer (the queues all empty; one
        running answers at once, without a look at the others)."""
        sched = self.sched
        if not requests or getattr(sched, "running", None):
            return False
        return all(not getattr(sched, name, None) for name in self.shape.queues)

    def receiving(self) -> set[str]:
        """The requests seen waiting for remote KV at a read (kept once finished, while vLLM keeps them)."""
        return self._receiving

    def popped(self, rid: str) -> None:
        """A manager pops ``rid``'s list: a preemption when the request still runs."""
        self.moves.popped(rid)

    # -- the read ----------------------------------------------------------------------------------

    def read(self, queues: Mapping[str, int], mgrs: tuple[Any, ...], reading: Reading) -> Waits:
        """The owners and the moves, each read on its own (a failure of one is noted, the other
        still counts)."""
        requests: Mapping[str, Any] = getattr(self.sched, "requests", {})
        in_queues = sum(queues.get(q, 0) for q in self.shape.queues)
        none: tuple[Owner, ...] = ()
        owners = reading.guard("waits.owners", lambda: self._owners(requests, in_queues, mgrs), none)
        moves = reading.guard("waits.moves", lambda: self.moves.read(queues), None)
        parked = bool(requests) and in_queues == 0
        return Waits(owners, self.timeouts, moves, parked)

    def _owners(
        self, requests: Mapping[str, Any], in_queues: int, mgrs: tuple[Any, ...]
    ) -> tuple[Owner, ...]:
        expected = len(requests) - in_queues  # requests vLLM keeps beyond its queues
        if not self.kept and expected <= 0 and not self._receiving and not self._blocked_places():
            return ()  # the usual case: nothing kept, nothing waits for remote KV (no request read)
        self._prune(requests, expected)
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
        aborted = status is not None and status is member(status, "FINISHED_ABORTED")
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
            if status is not None and status is member(status, "WAITING_FOR_REMOTE_KVS"):
                found.append(request.request_id)
        return found


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

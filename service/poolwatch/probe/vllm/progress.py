"""What a vLLM scheduler did since the probe's last read: its progress (EngineCore thread).

The running list compared with the last read's by identity (C speed, no request read), the
tokens the steps since scheduled (each ``schedule`` output's ``total_num_scheduled_tokens``, told by
the probe's wrap of ``schedule``: vLLM counts them computed at once; where no output was seen, each
running request's ``num_computed_tokens`` compared with the last read's, O(running)), the requests
finished since (counted at the update hook) and the preemptions seen inside ``schedule`` (a manager
popping a *running* request's list: :meth:`VllmProgress.popped`).  A preemption is fruitless when its
victim's blocks are fenced by a step still in flight (``defer_block_free`` and ``last_sched_seq``
beyond ``processed_step_seq``, 0.24+), so it frees nothing at once.  Requests waiting in a blocked
status (remote KV, a grammar, a streamed input) are not admittable: counted off ``deferred_waiting``
(0.31+), found in ``skipped_waiting`` (0.18 - 0.30), and on older releases counted in ``waiting``
only while nothing moves (the one read where it matters: a stall).

Cost per read: O(1) plus C-level passes over the running list's identities (no request read) where
the steps' outputs were seen, which is every release's ``Scheduler`` under the probe's wrap.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from poolwatch.probe.core.waiting import Moves
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["VllmProgress", "member"]

_NCT = operator.attrgetter("num_computed_tokens")
_BLOCKED = ("WAITING_FOR_REMOTE_KVS", "WAITING_FOR_FSM", "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR",
            "WAITING_FOR_STREAMING_REQ")  # fmt: skip
MAX_HEAD = 8


def _new(running: list[Any], last: list[Any]) -> int:
    """How many of ``running`` are not in ``last``, by identity: a set of the requests themselves
    where their classes keep object's own equality and hash (C-level, no int made per request),
    else of their ids."""
    classes: set[Any] = set(map(type, running)).union(map(type, last))
    if all(_plain(c) for c in classes):
        return len(set(running).difference(last))
    return len(set(map(id, running)).difference(map(id, last)))


def _plain(cls: Any) -> bool:
    """Whether ``cls`` keeps object's own equality and hash (identity)."""
    return bool(cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__)


def _status(request: Any) -> str:
    """The name of ``request``'s status ("" for none)."""
    return str(getattr(getattr(request, "status", None), "name", ""))


def member(status: Any, name: str) -> Any:
    """The member ``name`` of a request status's enum (None when the release has none)."""
    return getattr(type(status), name, None)


class VllmProgress:
    """One scheduler's moves between reads: told by the hooks, compared at each read."""

    def __init__(self, scheduler: Any, shape: VllmShape) -> None:
        self.sched, self.shape = scheduler, shape
        self.step_preempted: set[str] = set()  # this step's victims (a pop is announced once)
        self.finished = 0  # requests finished since the last read (counted by the update hook)
        self._preempted: list[tuple[str, bool]] = []
        self._running: list[Any] | None = None  # the last read's running list (a copy, kept while equal)
        self._ncts: dict[int, int] | None = {}
        self._tokens = -1
        self.told = False  # a step's output was seen (its scheduled tokens counted)
        self._scheduled = 0  # tokens the steps scheduled since the last read
        self._blocked_waiting = 0  # blocked requests in ``waiting`` at the last look (<= 0.17)
        # the requests the steps since the last read scheduled for the first time (their outputs'
        # ``scheduled_new_reqs``; None: an output without it), and those preempted and not seen
        # back at a read: while none is, a request that entered the running list is a new one
        self._entered: list[Any] | None = []  # each output's list
        self._out: set[str] = set()

    def scheduled(self, output: Any) -> None:
        """After ``schedule``: the tokens its output schedules (vLLM counts them computed at once)."""
        tokens = getattr(output, "total_num_scheduled_tokens", None)
        if type(tokens) is int:
            self.told = True
            self._scheduled += tokens
        new = getattr(output, "scheduled_new_reqs", None)
        if new is None:
            self._entered = None
        elif new and self._entered is not None:
            self._entered.append(new)  # (their ids read at the read, not at every step)

    def popped(self, rid: str) -> None:
        """A manager pops ``rid``'s list (inside ``schedule``): a preemption when the request still runs."""
        request = self.sched.requests.get(rid)
        status = getattr(request, "status", None)
        if status is None or status is not member(status, "RUNNING") or rid in self.step_preempted:
            return
        self.step_preempted.add(rid)
        sched = self.sched
        fenced = bool(getattr(sched, "defer_block_free", False)) and getattr(
            request, "last_sched_seq", -1
        ) > getattr(sched, "processed_step_seq", 1 << 62)
        self._preempted.append((rid, fenced))
        self._out.add(rid)

    def read(self, queues: Mapping[str, int]) -> Moves:
        """The moves since the last read, and the baseline of the next."""
        live = getattr(self.sched, "running", ())
        last = self._running
        same = last is not None and len(last) == len(live) and all(map(operator.is_, last, live))
        running = last if same and last is not None else list(live)  # (no copy while it is the same)
        if self.told:  # the steps' own outputs say whether tokens were computed: no request read
            admitted = 0 if same or last is None else self._admitted(running, last)
            progressed = last is None or self.finished > 0 or admitted > 0 or self._scheduled > 0
            self._ncts, self._tokens = None, -1
        else:
            admitted, progressed = self._compared(running, same)
        self._running, self.finished, self._scheduled, self._entered = running, 0, 0, []
        preempted, self._preempted = tuple(self._preempted), []
        waiting = sum(v for q, v in queues.items() if q in self.shape.queues and q != "running")
        admittable = max(0, waiting - self._blocked(progressed))
        head = self._head() if admittable and not progressed else ()
        return Moves(progressed, admitted, admittable, head, preempted)

    def _admitted(self, running: list[Any], last: list[Any]) -> int:
        """The requests running now that were not at the last read (by identity).  While no request
        was preempted since the last read or waits preempted, one that entered the running list
        since is a new one (in its step's ``scheduled_new_reqs``): those still running are counted,
        O(new requests); else the two lists are compared, O(running)."""
        entered, out = self._entered, self._out
        if out:  # (a preempted request is out until a read finds it no longer preempted)
            requests = self.sched.requests
            self._out = {rid for rid in out if _status(requests.get(rid)) == "PREEMPTED"}
        if entered is None or out or self._preempted:
            return _new(running, last)
        requests = self.sched.requests
        rids = {new.req_id for outputs in entered for new in outputs}
        return sum(1 for rid in rids if _status(requests.get(rid)) == "RUNNING")

    def _compared(self, running: list[Any], same: bool) -> tuple[int, bool]:
        """Admissions and progress from the running requests' computed tokens, compared with the last
        read's (where no step output was seen: each request is read, O(running))."""
        ncts = list(map(_NCT, running))
        tokens = sum(ncts)
        before = self._ncts
        admitted, progressed = 0, self.finished > 0
        now: dict[int, int] | None = None
        if self._running is None or before is None:
            progressed = True  # the first read (or the first without outputs): nothing to compare with
        elif same:
            progressed = progressed or tokens != self._tokens
        else:
            now = dict(zip(map(id, running), ncts, strict=True))
            admitted = len(now.keys() - before.keys())
            # (admitted: progress already; else the first request found grown ends the look)
            progressed = (
                progressed or admitted > 0 or any(now[i] > before[i] for i in now.keys() & before.keys())
            )
        if not same or tokens != self._tokens or before is None:  # each running request's count
            self._ncts = dict(zip(map(id, running), ncts, strict=True)) if now is None else now
        self._tokens = tokens
        return admitted, progressed

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

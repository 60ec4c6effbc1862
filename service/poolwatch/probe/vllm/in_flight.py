"""Freed while in flight: a block returned to the pool while a step that lists it may still write it.

With overlapping steps (async scheduling, pipeline parallelism) EngineCore schedules step N+1
before step N's output is applied, so a request that finishes, is aborted or is preempted in
between still has a step in flight that reads and writes its blocks.  Freeing them then is safe
only while every later writer is ordered after that step on the device; a KV *consumer* connector
is not (its loads fill newly allocated blocks outside the step's stream), so a block freed early
can be refilled by a load while the in-flight step still writes it: silent KV corruption, with the
books balanced (vLLM #45357, fixed in 0.24.0 by fencing such frees behind the step:
``deferred_frees``).  The class is any free ahead of the last step that lists the block, on any
release; this module proves it at the free, before the block can be handed out again.

What it keeps (EngineCore thread; nothing of vLLM's is written):

* the steps in flight: each non-empty ``SchedulerOutput`` from ``schedule`` until its
  ``update_from_output`` starts (FIFO, matched by identity; an output being applied is done on
  the device);
* at a request's pop (:meth:`InFlight.popped`, a manager about to free or defer its list): if a
  step in flight lists the request, its blocks, by id, with the request and the step;
* at a free (:meth:`InFlight.check`, inside ``BlockPool.free_blocks``): the blocks of this call
  kept so -- freed while their step is in flight.  A deferred free (0.24+) is popped at once but
  freed only once its fence step's output is applied: by then the step has left and its entries
  were dropped, so the fixed release is never named.

Armed only where the hazard exists: a scheduler with a KV consumer connector (the blocks popped are
kept only then: ``writer``); the steps in flight are also what a spec-decode rollback is judged
against (:mod:`~poolwatch.probe.vllm.rollback`: the drafts in flight, :meth:`InFlight.drafts`).
Cost: one append and one popleft per step; a dict lookup per scheduled-step count at each pop; at a
free, nothing unless an entry is kept, then a lookup per block.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["InFlight", "unordered_writer"]

_MAX_KEPT = 65_536  # block entries kept at most (a step in flight never lists more than the pool)


def unordered_writer(scheduler: Any) -> str | None:
    """What can refill a freed block outside the step's order (the connector's class name), or None."""
    connector = getattr(scheduler, "connector", None)
    config = getattr(getattr(scheduler, "vllm_config", None), "kv_transfer_config", None)
    if connector is None or config is None:
        return None
    try:
        consumer = bool(config.is_kv_consumer)
    except Exception:  # an unreadable role: no proof of the hazard
        return None
    return type(connector).__name__ if consumer else None


class InFlight:
    """The steps in flight on one scheduler, and the blocks popped while one of them lists them."""

    def __init__(self, writer: str | None) -> None:
        self.writer = writer  # the unordered writer (None: only the steps are kept)
        self.steps: deque[tuple[int, Any, Mapping[str, Any]]] = deque()  # (seq, output, scheduled)
        self.seq = 0  # non-empty steps scheduled
        self.kept: dict[int, tuple[str, int]] = {}  # block id -> (request, the step in flight)

    def scheduled(self, output: Any) -> None:
        """After ``schedule`` returned ``output``: a non-empty step is in flight until applied."""
        listed = getattr(output, "num_scheduled_tokens", None)
        if listed:
            self.seq += 1
            self.steps.append((self.seq, output, listed))

    def applying(self, output: Any) -> None:
        """Before ``update_from_output(output)``: that step (and any older) is done on the device."""
        steps = self.steps
        if not any(out is output for _, out, _ in steps):
            return
        while steps:
            _, out, _ = steps.popleft()
            if out is output:
                break
        if self.kept:
            oldest = steps[0][0] if steps else self.seq + 1
            self.kept = {b: v for b, v in self.kept.items() if v[1] >= oldest}

    def popped(self, request_id: str, blocks: Sequence[Any]) -> None:
        """A manager pops ``request_id``'s list to free (or defer) it: keep its blocks if a step in
        flight lists the request."""
        step = self._latest(request_id) if self.writer is not None else None
        if step is None or len(self.kept) >= _MAX_KEPT:
            return
        for block in blocks:
            if not getattr(block, "is_null", False):
                self.kept[block.block_id] = (str(request_id), step)

    def check(self, blocks: Sequence[Any]) -> dict[str, tuple[int, ...]]:
        """Inside ``free_blocks``: ``{request: block ids}`` freed while a step that lists them is in
        flight (empty on the healthy path, at the cost of one truth test)."""
        if not self.kept:
            return {}
        out: dict[str, list[int]] = {}
        kept = self.kept
        for block in blocks:
            entry = kept.pop(block.block_id, None)
            if entry is not None:
                out.setdefault(entry[0], []).append(block.block_id)
        return {rid: tuple(ids) for rid, ids in out.items()}

    def drafts(self, request_id: str) -> int:
        """The draft tokens the steps in flight carry for ``request_id`` (a rollback can undo them)."""
        total = 0
        for _, out, _ in self.steps:
            spec = getattr(out, "scheduled_spec_decode_tokens", None)
            listed = spec.get(request_id) if spec else None
            if listed:
                total += len(listed)
        return total

    def step_of(self, block_id: int) -> int | None:
        entry = self.kept.get(block_id)
        return None if entry is None else entry[1]

    def _latest(self, request_id: str) -> int | None:
        seq: int
        for seq, _, listed in reversed(self.steps):
            if request_id in listed:
                return seq
        return None

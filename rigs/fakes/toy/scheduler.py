"""The toy engine itself: one pool of ``size`` slots, a free list, requests holding slots.

Its loop calls ``step()`` at the start of each iteration and ``idle()`` when it has nothing to do,
as SGLang's does.  ``finish`` gives a request's slots back; the faults are a finish that keeps them
(a leak) and a free of a slot twice (a double free).  Nothing here knows poolwatch.
"""

from __future__ import annotations


class ToyScheduler:
    def __init__(self, size: int = 32, *, rank: int = 0) -> None:
        self.size = size
        self.free = list(range(size))
        self.held: dict[str, list[int]] = {}
        self.waiting: list[tuple[str, int]] = []
        self.rank = rank
        self.iterations = 0

    def submit(self, rid: str, slots: int) -> None:
        self.waiting.append((rid, slots))

    def step(self) -> None:
        """One iteration: admit what fits."""
        self.iterations += 1
        while self.waiting and self.waiting[0][1] <= len(self.free):
            rid, n = self.waiting.pop(0)
            self.held[rid], self.free = self.free[:n], self.free[n:]

    def idle(self) -> None:
        """Called by the loop when there is nothing to do."""

    def finish(self, rid: str, *, leak: bool = False) -> None:
        slots = self.held.pop(rid)
        if not leak:
            self.free += slots

    def double_free(self, rid: str) -> int:
        """Free one of a running request's slots while it still holds it."""
        slot = self.held[rid][0]
        self.free.append(slot)
        return slot

"""The stand-in engine's code: a pool whose ``free`` a probe may wrap, a scheduler that frees into
it from a known line, and a loop that calls a hook.  Nothing here knows poolwatch."""

from __future__ import annotations

from collections.abc import Callable


class SlotPool:
    def __init__(self) -> None:
        self.free_slots: list[int] = []

    def free(self, ids: list[int]) -> None:
        self.free_slots += ids


class Scheduler:
    def __init__(self) -> None:
        self.pool = SlotPool()

    def release(self, ids: list[int]) -> None:
        self.pool.free(ids)  # FREES

    def finish(self, ids: list[int]) -> None:
        self.release(ids)  # RELEASES

    def step(self) -> None:
        """A hooked method."""

    def loop(self) -> None:
        self.step()  # STEPS

    def deep(self, depth: int, then: Callable[[], None]) -> None:
        if depth:
            self.deep(depth - 1, then)
        else:
            then()


def line_of(marker: str) -> int:
    """The line of this file that carries ``# marker``."""
    with open(__file__, encoding="utf-8") as source:
        return next(n for n, text in enumerate(source, 1) if text.rstrip().endswith(f"# {marker}"))

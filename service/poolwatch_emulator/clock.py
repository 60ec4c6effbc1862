"""The simulated clock every emulated rank reads (never the wall clock)."""

from __future__ import annotations

import time

__all__ = ["SimClock"]


class SimClock:
    """Simulated seconds since the cluster started; ``unix()`` maps them onto calendar time."""

    def __init__(self, epoch: float | None = None):
        self.epoch = time.time() if epoch is None else epoch
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"the clock cannot go back ({seconds} s)")
        self.now += seconds

    def unix(self) -> float:
        return self.epoch + self.now

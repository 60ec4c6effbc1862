"""A clock the caller moves by hand (the tests, and the benchmarks that count in simulated time)."""

from __future__ import annotations


class FakeClock:
    """A clock moved by hand: reads ``now`` until :meth:`advance` moves it."""

    def __init__(self, now: float = 1_761_907_243.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

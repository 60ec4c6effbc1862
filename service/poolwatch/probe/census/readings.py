"""A census's count of an engine counter's quantity, beside the counter itself (pure; nothing read here).

A census that can count a counter's quantity from the ids (SGLang's tree by node lock, a chunk
cache's request prefixes; vLLM's free queue walked) reads both at the same hook and hands back one
:class:`CounterReading` per counter (a proof's ``counters()``); the neutral probe keeps the ones that
disagree as counter witnesses (:mod:`poolwatch.probe.core.counters`).
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.model.rank import Pool

__all__ = ["CounterReading"]


@dataclass(frozen=True, slots=True)
class CounterReading:
    """One counter and the census's count of the same quantity, read at one hook."""

    pool: Pool
    figure: str  # the account figure the counter feeds (one of poolwatch.model.witness.COUNTER_FIGURES)
    counter: str  # the engine's own name for it
    reported: int
    census: int

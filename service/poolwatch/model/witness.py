"""What the probe's identity census says about the engine's own counters: a counter witness.

An engine keeps running counters beside its id sets -- SGLang's tree ``evictable_size_`` and
``protected_size_``, vLLM's ``free_block_queue.num_free_blocks`` -- and its own checks read those
counters, not the ids.  When a counter drifts (a lock released by hand, a release that forgets
to take a request's share back out), the books no longer describe the pool: a probe that reads
the same counters would see a double free or a leak where every slot is fine.  The census counts
the same quantity from the ids themselves (the tree's nodes by lock, the requests' prefixes, the
free queue's walk); where the two disagree, **the census is right**, and the disagreement is a
finding of its own: which counter, by how much, since when.  Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.model.rank import Pool

__all__ = ["COUNTER_FIGURES", "CounterWitness"]

COUNTER_FIGURES = ("available", "evictable", "protected")  # the account figures a counter can feed


@dataclass(frozen=True, slots=True)
class CounterWitness:
    """One engine counter the census disagrees with, as measured at the last census that read it.

    ``figure`` is the :class:`~poolwatch.model.rank.PoolAccount` figure the counter feeds; the
    probe publishes that figure as the census counts it (``reported - drift`` at every sample until
    the next census measures it again), so the pool's gap is judged from the census's figures.
    ``reported`` is signed: a counter below zero is the plainest drift of all."""

    pool: Pool
    figure: str  # one of COUNTER_FIGURES
    counter: str  # the engine's own name for it: "tree_cache.protected_size()", "num_free_blocks"
    reported: int  # what the counter said at the census (may be negative)
    census: int  # what the census counts for the same quantity, from the ids
    seq: int  # the scheduler iteration of the census that measured both
    since_seq: int  # the iteration of the first census (this boot) that found this counter off
    since: float  # unix seconds of that first census

    @property
    def drift(self) -> int:
        """How far the counter is off, signed: ``reported - census`` (slots; vLLM's blocks)."""
        return self.reported - self.census

"""The counter witness: the engine's counters against the census, for every engine alike (pure
bookkeeping; the rooms' censuses measure, this module keeps and applies what they found).

A census that can count a counter's quantity from the ids (SGLang's tree by node lock, a chunk
cache's request prefixes; vLLM's free queue walked) hands back a
:class:`~poolwatch.probe.census.readings.CounterReading` per counter: what the engine's counter
says and what the ids say, read at the same hook.  Where they differ, the census is right
(:mod:`poolwatch.model.witness`):

* the disagreement is kept as a :class:`~poolwatch.model.witness.CounterWitness` (which counter,
  by how much, since which census) and published in every snapshot until a census finds the two
  agreeing again;
* every sample's figure is judged from the census: ``counter - drift`` (:meth:`CounterBook.judged`),
  so the pool's gap is the census's and a counter-only bug is never a double free or a leak.  The
  drift is the last census's; when the counter moves again the judged gap moves with it, and a
  new surplus is censused at once (:mod:`~poolwatch.probe.core.schedule`), re-measuring the drift;
* a counter below zero is proof of a drift without any census: it is never published as a figure
  (the snapshot's figures are counts), and it asks for a census at once (:meth:`CounterBook.suspect`)
  whenever its value is one no census has measured yet.

Cost: one ``min`` over each account's figures per sample while no witness is kept; O(pools)
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.model.witness import COUNTER_FIGURES, CounterWitness
from poolwatch.probe.census.readings import CounterReading

__all__ = ["CounterBook", "readings_of"]

_FIGURES = ("size", "available", "evictable", "protected", "held", "session_held")


def readings_of(proof: object) -> tuple[CounterReading, ...]:
    """The counter readings a census proof carries (``counters()``; none for a proof without)."""
    method = getattr(proof, "counters", None)
    return tuple(method()) if callable(method) else ()


class CounterBook:
    """The counters the censuses found off, and the figures judged from them."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Pool, str], CounterWitness] = {}

    def measured(self, readings: Iterable[CounterReading], seq: int, wall: float) -> bool:
        """Take a census's readings; True when a witness appeared, moved or went away."""
        changed = False
        for r in readings:
            if r.figure not in COUNTER_FIGURES:
                raise ValueError(f"{r.figure!r} is not a counter figure ({', '.join(COUNTER_FIGURES)})")
            key = (r.pool, r.figure)
            old = self._kept.get(key)
            if r.reported == r.census:
                changed |= self._kept.pop(key, None) is not None
                continue
            since_seq, since = (old.since_seq, old.since) if old is not None else (seq, wall)
            new = CounterWitness(r.pool, r.figure, r.counter, r.reported, r.census, seq, since_seq, since)
            changed |= old is None or old.reported != new.reported or old.census != new.census
            self._kept[key] = new
        return changed

    def all(self) -> tuple[CounterWitness, ...]:
        """The witnesses kept, in pool then figure order."""
        if not self._kept:
            return ()  # the usual case: nothing witnessed (no order to build)
        order = {p: i for i, p in enumerate(Pool)}
        return tuple(sorted(self._kept.values(), key=lambda w: (order[w.pool], w.figure)))

    def suspect(self, pools: Mapping[Pool, PoolAccount]) -> bool:
        """Whether an exact account shows a counter below zero that no census has measured at
        that value (then the censuses run at once)."""
        for pool, account in pools.items():
            if account.exactness is not Exactness.EXACT:
                continue
            for figure in COUNTER_FIGURES:
                value = getattr(account, figure)
                if value is not None and value < 0:
                    kept = self._kept.get((pool, figure))
                    if kept is None or kept.reported != value:
                        return True
        return False

    def judged(self, pools: Mapping[Pool, PoolAccount]) -> dict[Pool, PoolAccount]:
        """``pools`` with each witnessed figure as the census counts it (``counter - drift``), and
        no figure below zero: one that would be is published as unreadable, with the reason."""
        if not self._kept and all(map(_non_negative, pools.values())):
            return dict(pools)  # the common case: nothing witnessed, nothing below zero
        out: dict[Pool, PoolAccount] = {}
        for pool, account in pools.items():
            changes: dict[str, int | None] = {}
            notes: list[str] = []
            for figure in _FIGURES:
                value = getattr(account, figure)
                kept = self._kept.get((pool, figure))
                if kept is not None and value is not None:
                    value = changes[figure] = value - kept.drift
                if value is not None and value < 0:
                    changes[figure] = None
                    notes.append(f"{figure} below zero")
            unreadable = (*account.unreadable, *notes) if notes else account.unreadable
            out[pool] = replace(account, **changes, unreadable=unreadable) if changes else account  # type: ignore[arg-type]
        return out


def _non_negative(account: PoolAccount) -> bool:
    a = account
    return min(a.available or 0, a.evictable or 0, a.protected or 0, a.held or 0, a.session_held or 0) >= 0

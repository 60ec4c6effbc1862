"""The tripwires a rank has tripped: kept from the first sighting on, bounded.

A proven identity fault (a slot freed twice, a free slot still in use) does not heal: the pool is
corrupt until the server restarts.  So a tripwire stays in every later snapshot with the hook and
iteration where it was *first* seen; the same finding seen again later is not added twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from poolwatch.model import Pool, Tripwire, TripwireKind

__all__ = ["MAX_TRIPWIRES", "TripwireLog"]

MAX_TRIPWIRES = 32


class TripwireLog:
    def __init__(self, limit: int = MAX_TRIPWIRES) -> None:
        self.limit = limit
        self._first: dict[tuple[TripwireKind, Pool, tuple[int, ...]], Tripwire] = {}
        self.dropped = 0

    def add(self, found: Iterable[Tripwire]) -> bool:
        """Record new findings; True if any was new."""
        new = False
        for tripwire in found:
            key = (tripwire.kind, tripwire.pool, tripwire.slots)
            if key in self._first:
                continue
            if len(self._first) >= self.limit:
                self.dropped += 1
                continue
            self._first[key] = tripwire
            new = True
        return new

    def all(self) -> tuple[Tripwire, ...]:
        return tuple(self._first.values())

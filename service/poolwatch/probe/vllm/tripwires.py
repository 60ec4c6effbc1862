"""The tripwires a vLLM rank has tripped, kept from their first sighting, one finding per block.

A block freed twice does not heal: the pool stays corrupt until EngineCore restarts, so every
later snapshot carries the finding with the hook and step where it was first seen.  The same block
found again under the same kind adds nothing; at most ``limit`` findings are kept and the rest
counted in :attr:`Sightings.dropped` (the probe's health).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from poolwatch.model import Pool, Tripwire, TripwireKind

__all__ = ["MAX_TRIPWIRES", "Sightings"]

MAX_TRIPWIRES = 32


class Sightings:
    def __init__(self, limit: int = MAX_TRIPWIRES) -> None:
        self.limit = limit
        self._found: list[Tripwire] = []
        self._seen: set[tuple[TripwireKind, Pool, int]] = set()
        self.dropped = 0

    def add(self, found: Iterable[Tripwire]) -> bool:
        """Record new findings; True if any block was new."""
        new = False
        for tripwire in found:
            fresh = tuple(s for s in tripwire.slots if (tripwire.kind, tripwire.pool, s) not in self._seen)
            if not fresh:
                continue
            if len(self._found) >= self.limit:
                self.dropped += 1
                continue
            self._seen.update((tripwire.kind, tripwire.pool, s) for s in fresh)
            self._found.append(replace(tripwire, slots=fresh))
            new = True
        return new

    def all(self) -> tuple[Tripwire, ...]:
        return tuple(self._found)

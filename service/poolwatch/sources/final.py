"""A rank's final snapshot: what its probe wrote just before SGLang's idle check killed it.

When the probe sees that SGLang's strict idle check is about to raise (a fully idle rank with a
pool out of balance), it writes the snapshot that proves it -- pool, sign, slot ids, the hook where
the fault was first seen -- into the discovery directory (:func:`poolwatch.discovery.final.write_final`)
before SGLang raises.  The sidecar reads it in two places:

* the rank's :class:`~poolwatch.sources.probe.ProbeSource`, when its request fails (the process is
  gone but its discovery file is still there): it answers with the final snapshot once;
* a :class:`FinalSnapshotSource`, for a final file whose rank no longer has a discovery file (the
  process removed it on its way out): it delivers the snapshot once.

A final snapshot older than ``max_age`` seconds is old news (a sidecar restarted long after the
crash) and is not delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.final import read_final
from poolwatch.errors import PayloadError, Reason
from poolwatch.model import Snapshot
from poolwatch.sources.base import Source, Target, with_target_identity

__all__ = ["MAX_AGE_S", "FinalSnapshotSource", "load_final"]

MAX_AGE_S = 300.0  # a final snapshot older than this (a sidecar restarted long after) is old news


def load_final(path: str | Path) -> Snapshot | None:
    """The final snapshot at ``path``, or ``None`` if there is none (or it is not one)."""
    try:
        snap = parse_snapshot(read_final(path))
    except (OSError, ValueError, RecursionError):
        return None
    return snap if snap.final else None


class FinalSnapshotSource(Source):
    """Delivers one vanished rank's final snapshot once (``target.location`` is the file)."""

    def __init__(self, target: Target, clock: Callable[[], float], max_age: float = MAX_AGE_S) -> None:
        self._target = target
        self._clock = clock
        self._max_age = max_age
        self._sent = ""

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        snap = await asyncio.to_thread(load_final, self._target.location)
        if snap is None:
            raise PayloadError(Reason.SCHEMA, f"{self._target.location}: not a final snapshot")
        key = f"{snap.boot_id}/{snap.seq}"
        if key == self._sent or self._clock() - snap.taken_at > self._max_age:
            return []
        self._sent = key
        return [with_target_identity(snap, self._target)]

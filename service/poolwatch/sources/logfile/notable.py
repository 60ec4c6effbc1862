"""Which of a log source's snapshots the sidecar must see: engine-neutral.  Pure.

A log speaks in bursts (a backlog, a crash and its traceback): of the snapshots one scrape folds,
the detector needs every one that carries an incident or a negative used count (each is evidence
of its own) and, per rank, the latest (the current figures); the rest are superseded.
"""

from __future__ import annotations

from poolwatch.model.snapshot import Snapshot

__all__ = ["keep_notable"]


def keep_notable(snaps: list[Snapshot]) -> list[Snapshot]:
    """Per rank: every snapshot with an incident or a negative used count, and the last one."""
    last = {s.worker.key: i for i, s in enumerate(snaps)}
    return [s for i, s in enumerate(snaps) if last[s.worker.key] == i or _notable(s)]


def _notable(snap: Snapshot) -> bool:
    return bool(snap.incidents) or any((a.used or 0) < 0 for a in snap.pools.values())

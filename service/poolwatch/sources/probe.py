"""The in-process probe's snapshot: ``GET <url>/v1/snapshot`` -> :func:`poolwatch.codec.parse_snapshot`.

The probe reads every term of the conservation equation at one scheduler loop boundary, so its
pool accounts are exact (protected, held, tripwires).  The payload names its rank; the target
adds what the sidecar knows better (the worker name and role from the pod's environment).
"""

from __future__ import annotations

from dataclasses import replace

import httpx

from poolwatch.codec import SnapshotFormatError, SnapshotVersionError, parse_snapshot
from poolwatch.errors import PayloadError, Reason, SchemaVersionError
from poolwatch.model import Role, Snapshot
from poolwatch.sources.base import Target
from poolwatch.sources.http import get_json, join_url

__all__ = ["SNAPSHOT_PATH", "ProbeSource", "parse_probe_payload"]

SNAPSHOT_PATH = "/v1/snapshot"


def parse_probe_payload(doc: object, target: Target) -> Snapshot:
    """A decoded probe payload as a snapshot of ``target``; raises ``PayloadError``."""
    try:
        snap = parse_snapshot(doc)
    except SnapshotVersionError as exc:
        raise SchemaVersionError(f"{target.location}: {exc}") from None
    except SnapshotFormatError as exc:
        raise PayloadError(Reason.SCHEMA, f"{target.location}: {exc}") from None
    return with_target_identity(snap, target)


def with_target_identity(snap: Snapshot, target: Target) -> Snapshot:
    """The target's worker name and role win when it has them (the sidecar knows its pod)."""
    worker = snap.worker
    if target.worker:
        worker = replace(worker, worker=target.worker)
    if target.role is not Role.UNIFIED:
        worker = replace(worker, role=target.role)
    if not worker.instance:
        worker = replace(worker, instance=target.labels.get("instance", ""))
    return snap if worker == snap.worker else replace(snap, worker=worker)


class ProbeSource:
    """Reads one probe endpoint (one scheduler rank)."""

    def __init__(self, target: Target, max_bytes: int = 4 << 20) -> None:
        self._target = target
        self._max_bytes = max_bytes

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        doc = await get_json(client, self.url, self._max_bytes)
        return [parse_probe_payload(doc, self._target)]

    @property
    def url(self) -> str:
        loc = self._target.location
        return loc if loc.rstrip("/").endswith(SNAPSHOT_PATH) else join_url(loc, SNAPSHOT_PATH)

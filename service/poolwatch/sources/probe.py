"""The in-process probe's snapshot: ``GET <url>/v1/snapshot`` -> :func:`poolwatch.codec.parse_snapshot`.

The probe reads every term of the conservation equation at one scheduler loop boundary, so its
pool accounts are exact (protected, held, tripwires).  The payload names its rank; the target
adds what the sidecar knows better (the worker name and role from the pod's environment).
"""

from __future__ import annotations

from dataclasses import replace

import httpx

from poolwatch.codec import SnapshotFormatError, parse_snapshot
from poolwatch.conservation import signature
from poolwatch.model import Role, Snapshot
from poolwatch.sources.base import Source, Target
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.http import get_json, join_url

__all__ = ["SNAPSHOT_PATH", "ProbeSource", "parse_probe_payload"]

SNAPSHOT_PATH = "/v1/snapshot"


def parse_probe_payload(doc: object, target: Target) -> Snapshot:
    """A decoded probe payload as a snapshot of ``target``; raises ``PayloadError``."""
    try:
        snap = parse_snapshot(doc)
    except SnapshotFormatError as exc:
        raise scrape_failure(exc, target.location) from None
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


class ProbeSource(Source):
    """Reads one probe endpoint (one scheduler rank).

    With ``long_poll_s > 0`` it *watches*: each request tells the probe the signature of the
    last snapshot seen and waits up to ``long_poll_s`` for a different one, so a new imbalance or
    tripwire arrives within one probe sample instead of one scrape interval (``long_poll`` tells
    the scrape loop not to sleep between such requests)."""

    def __init__(self, target: Target, max_bytes: int = 4 << 20, long_poll_s: float = 0.0) -> None:
        self._target = target
        self._max_bytes = max_bytes
        self._long_poll_s = long_poll_s
        self._seen = ""

    @property
    def target(self) -> Target:
        return self._target

    @property
    def long_poll(self) -> bool:
        return self._long_poll_s > 0

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        doc = await get_json(client, self.request_url, self._max_bytes)
        snap = parse_probe_payload(doc, self._target)
        self._seen = signature(snap)
        return [snap]

    @property
    def request_url(self) -> str:
        if not self.long_poll:
            return self.url
        query = httpx.QueryParams({"sig": self._seen, "wait": f"{self._long_poll_s:g}"})
        return f"{self.url}?{query}"

    @property
    def url(self) -> str:
        loc = self._target.location
        return loc if loc.rstrip("/").endswith(SNAPSHOT_PATH) else join_url(loc, SNAPSHOT_PATH)

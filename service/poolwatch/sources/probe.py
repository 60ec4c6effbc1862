"""The in-process probe's snapshot: ``GET <url>/v1/snapshot`` -> :func:`poolwatch.codec.parse_snapshot`.

The probe reads every term of the conservation equation at one scheduler loop boundary, so its
pool accounts are exact (protected, held, tripwires).  The payload names its rank; the target
adds what the sidecar knows better (the worker name and role from the pod's environment).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from poolwatch.codec import SnapshotFormatError, parse_snapshot
from poolwatch.conservation import signature
from poolwatch.errors import Reason, ScrapeError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model import Snapshot
from poolwatch.sources.base import Source, Target, with_target_identity
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.final import load_final
from poolwatch.sources.http import get_json, join_url

__all__ = ["SNAPSHOT_PATH", "ProbeSource", "parse_probe_payload"]

SNAPSHOT_PATH = "/v1/snapshot"


def parse_probe_payload(doc: object, target: Target, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """A decoded probe payload as a snapshot of ``target``; raises ``PayloadError``."""
    try:
        snap = parse_snapshot(doc, limits)
    except SnapshotFormatError as exc:
        raise scrape_failure(exc, target.location) from None
    return with_target_identity(snap, target)


class ProbeSource(Source):
    """Reads one probe endpoint (one scheduler rank).

    With ``long_poll_s > 0`` it *watches*: each request tells the probe the signature of the
    last snapshot seen and waits up to ``long_poll_s`` for a different one, so a new imbalance or
    tripwire arrives within one probe sample instead of one scrape interval (``long_poll`` tells
    the scrape loop not to sleep between such requests)."""

    def __init__(
        self,
        target: Target,
        max_bytes: int = 4 << 20,
        long_poll_s: float = 0.0,
        final_path: str = "",
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._target = target
        self._limits = limits
        self._final_path = final_path  # where this rank's probe leaves its final snapshot
        self._final_sent = ""
        self._boot = ""  # the boot id of the last live answer
        self._max_bytes = max_bytes
        self._long_poll_s = long_poll_s
        self._seen = ""
        self._request: tuple[str, httpx.URL] | None = None  # (seen, its URL): parsed once per change

    @property
    def target(self) -> Target:
        return self._target

    @property
    def long_poll(self) -> bool:
        return self._long_poll_s > 0

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        try:
            doc = await self._fetch(client)
        except ScrapeError:
            final = self._final()
            if final is None:
                raise
            return [final]
        snap = parse_probe_payload(doc, self._target, self._limits)
        self._seen, self._boot = signature(snap), snap.boot_id
        return [snap]

    async def _fetch(self, client: httpx.AsyncClient) -> Any:
        """The long-poll's answer; when the probe refuses it (503: its few long-poll slots are
        taken, by a hostile local client say), the latest snapshot by a plain GET, then a pause of
        one wait, so the rank stays watched at the scrape interval and the loop does not spin."""
        try:
            return await get_json(client, self._request_url(), self._max_bytes)
        except ScrapeError as exc:
            if not (self.long_poll and exc.reason is Reason.HTTP_STATUS and "HTTP 503" in str(exc)):
                raise
        doc = await get_json(client, self.url, self._max_bytes)
        await asyncio.sleep(self._long_poll_s)
        return doc

    def _request_url(self) -> httpx.URL:
        """The next request's URL, parsed only when the signature changed (parsing and quoting a
        URL costs more than the rest of the request)."""
        if self._request is None or self._request[0] != self._seen:
            self._request = (self._seen, httpx.URL(self.request_url))
        return self._request[1]

    def _final(self) -> Snapshot | None:
        """The gone rank's final snapshot, once (see :mod:`poolwatch.sources.final`)."""
        snap = load_final(self._final_path) if self._final_path else None
        if snap is None or snap.boot_id != self._boot or snap.boot_id == self._final_sent:
            return None  # none, an earlier life's, or already delivered
        self._final_sent = snap.boot_id
        return with_target_identity(snap, self._target)

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

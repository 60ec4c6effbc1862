"""HTTP connection pools sized to the work: a shared pool for plain scrapes, a lane per long-poll.

A plain scrape holds one of ``scrape_concurrency`` slots for its short request, so the shared
client keeps that many connections alive (:func:`shared_limits`; httpx's default of 100
connections and 20 kept alive would open a new TCP connection for most scrapes of a large
fleet).  A long-poll (a watched probe) instead waits at the probe for up to a scrape interval:
it holds no scrape slot (see :mod:`poolwatch.sidecar.scraper`) and goes through its own *lane*,
a client with a single kept-alive HTTP/1.1 connection to that one probe.  A lane is a
:class:`~poolwatch.sources.wire.WireClient`: its plain-HTTP GETs go straight over an asyncio
stream (a tenth of httpx's CPU per request), ``https://`` ones through httpx.

Why one pool per lane rather than one big pool: httpcore assigns every request by walking
every connection and queued request of its pool, so 1,000 long-polls through one pool cost
O(1,000) per request (the 1,000-target livelock); a lane's pool has one connection.  The lanes
share one TLS context (building one per lane would load the CA bundle 1,000 times).

A sidecar built with an injected transport (the tests' ``httpx.MockTransport``) has no lanes:
long-polls use the shared client, still without holding scrape slots.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

import httpx

from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sources.wire import WireClient

__all__ = ["Lanes", "shared_limits"]

KEEPALIVE_FLOOR_S = 5.0  # httpx's default expiry; longer when scrapes are further apart


def _keepalive_expiry(settings: ScrapeSettings) -> float:
    """Keep a connection across the gap between two scrapes of one target (jitter included)."""
    return max(KEEPALIVE_FLOOR_S, 2.5 * settings.scrape_interval)


def shared_limits(settings: ScrapeSettings) -> httpx.Limits:
    """The shared client's pool: one kept-alive connection per concurrent plain scrape."""
    n = max(1, settings.scrape_concurrency)
    return httpx.Limits(
        max_connections=n, max_keepalive_connections=n, keepalive_expiry=_keepalive_expiry(settings)
    )


class Lanes:
    """One small client per long-polled target, opened on first use and closed with its target."""

    def __init__(self, settings: ScrapeSettings, *, verify: ssl.SSLContext | bool = True) -> None:
        self._timeout = (
            settings.scrape_timeout + settings.scrape_interval
        )  # the probe waits up to an interval
        self._limits = httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=_keepalive_expiry(settings)
        )
        self._verify: Any = verify
        self._clients: dict[str, httpx.AsyncClient] = {}

    def client(self, name: str) -> httpx.AsyncClient:
        """The lane of target ``name`` (created on first use)."""
        lane = self._clients.get(name)
        if lane is None:
            if self._verify is True:  # one TLS context for every lane, built when first needed
                self._verify = httpx.create_ssl_context()
            transport = httpx.AsyncHTTPTransport(verify=self._verify, limits=self._limits)
            lane = self._clients[name] = WireClient(transport=transport, timeout=self._timeout)
        return lane

    def __len__(self) -> int:
        return len(self._clients)

    async def release(self, name: str, lane: httpx.AsyncClient | None = None) -> None:
        """Close the lane of a target that is gone (its connection with it); given ``lane``, only
        that one (a replaced target's new lane under the same name stays open)."""
        if lane is None or self._clients.get(name) is lane:
            lane = self._clients.pop(name, None)
        if lane is not None:
            with contextlib.suppress(Exception):
                await lane.aclose()

    async def aclose(self) -> None:
        for name in list(self._clients):
            await self.release(name)

"""Shared by the fleet tests: a stand-in probe for the real snapshot route, and a scrape loop run
until every rank has been scraped a few times."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import httpx

from poolwatch.probe.core.publication import Publication
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source


class RouteProbe:
    """What the probe's snapshot route needs of a probe: nothing but its publication."""

    census: dict[str, Any] | None = None
    disabled = False

    def __init__(self, publication: Publication) -> None:
        self.publication = publication

    def disable(self) -> None: ...

    def enable(self) -> None: ...


async def scrape_until(
    store: SnapshotStore,
    sources: Sequence[Source],
    settings: ScrapeSettings,
    transport: httpx.AsyncBaseTransport,
    scrapes: int,
) -> None:
    """Run the scraper until each of ``sources`` has been scraped ``scrapes`` times (at most 60 s
    on a starved machine), then stop it."""
    scraper = Scraper(store, sources, settings)
    async with httpx.AsyncClient(transport=transport) as client:
        task = asyncio.create_task(scraper.run(client))
        try:
            for _ in range(600):
                await asyncio.sleep(0.1)
                targets = store.targets()
                if len(targets) == len(sources) and min(t.scrapes for t in targets) >= scrapes:
                    break
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

"""The scrape loop: every target on its own interval, failures contained per target.

One asyncio task per source; a slow or broken target only delays itself.  Each result lands
in the :class:`~poolwatch.store.SnapshotStore` (snapshots, or a failure with a bounded reason).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from poolwatch.errors import Reason, ScrapeError
from poolwatch.settings import ScrapeSettings
from poolwatch.sources.base import Source
from poolwatch.store import SnapshotStore

__all__ = ["Scraper"]

log = logging.getLogger("poolwatch.scraper")


class Scraper:
    """Scrapes a fixed set of sources into a store."""

    def __init__(
        self,
        store: SnapshotStore,
        sources: Sequence[Source],
        settings: ScrapeSettings,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._sources = list(sources)
        self._settings = settings
        self._clock = clock
        self._sleep = sleep

    async def scrape_once(self, source: Source, client: httpx.AsyncClient) -> bool:
        """Scrape one target once and record the outcome; never raises (but for cancellation)."""
        t = source.target
        started = time.perf_counter()
        try:
            snaps = await asyncio.wait_for(source.scrape(client), self._settings.scrape_timeout)
        except ScrapeError as exc:
            self._fail(source, started, exc.reason, str(exc))
            return False
        except TimeoutError:
            self._fail(source, started, Reason.TIMEOUT, f"no answer within {self._settings.scrape_timeout}s")
            return False
        except Exception as exc:  # a source bug must not kill the loop
            log.exception("event=source_error target=%s", t.name)
            self._fail(source, started, Reason.PARSE, f"{type(exc).__name__}: {exc}")
            return False
        for snap in snaps:
            self._store.put(snap)
        self._store.record_success(t.name, t.source, time.perf_counter() - started, self._clock())
        return True

    def _fail(self, source: Source, started: float, reason: Reason, message: str) -> None:
        t = source.target
        self._store.record_failure(t.name, t.source, time.perf_counter() - started, reason, message)

    async def run(self, client: httpx.AsyncClient) -> None:
        """Scrape every source forever (until cancelled)."""
        async with asyncio.TaskGroup() as group:
            for source in self._sources:
                group.create_task(self._loop(source, client))

    async def _loop(self, source: Source, client: httpx.AsyncClient) -> None:
        was_up: bool | None = None
        while True:
            up = await self.scrape_once(source, client)
            if up != was_up:
                log.info("event=target_%s target=%s", "up" if up else "down", source.target.name)
                was_up = up
            await self._sleep(self._settings.scrape_interval)

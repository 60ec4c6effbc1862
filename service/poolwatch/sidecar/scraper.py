"""The scrape loop: every target on its own jittered interval, failures contained per target.

One asyncio task per source, so a slow or broken target only delays itself; a semaphore caps
how many plain scrapes run at once, and each scrape has its own deadline (time spent waiting for
the semaphore does not count against it).  A long-poll (a watched probe: the request itself waits
at the probe for up to an interval) holds no such slot: it runs in its own lane, bounded by
``max_watches`` and, when the caller passes :class:`~poolwatch.sidecar.lanes.Lanes`, over its own
kept-alive connection, so 1,000 watched probes are each refreshed once per interval whatever
``scrape_concurrency`` is.  A failing target backs off exponentially (up to
``max_backoff``).  Results land in the :class:`~poolwatch.sidecar.store.SnapshotStore`: snapshots, or a
failure with a bounded :class:`~poolwatch.errors.Reason`.  The set of sources may change: when
``sources`` is a callable it is asked again every interval (the probe discovery directory), new
targets get a task, vanished ones are cancelled and forgotten.

Only state changes are logged (``event=target_down target=... reason=...``, then
``event=target_up``), never every failed poll; the ``httpx`` logger is quieted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence

import httpx

from poolwatch.addresses import scrub_urls
from poolwatch.errors import Reason, ScrapeError
from poolwatch.inert import inert
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.lanes import Lanes
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.final import RankExited

__all__ = ["Scraper", "SourceProvider"]

log = logging.getLogger("poolwatch.sidecar.scraper")

SourceProvider = Callable[[], Sequence[Source]]
JITTER = 0.1  # each wait is the interval +- 10%
MIN_WATCH_GAP = 0.05  # between two long-poll requests of one target (bounds the rate if it answers at once)
MAX_WATCHES = 4096  # long-polls in flight at once (at most one per watched target)
FINAL_POLL_S = 0.1  # while a failing probe backs off: how often its last word is looked for
FINAL_WATCH_FAILURES = 5  # ... during its first failures (1+2+4+8+16 s of back-off at a 1 s interval)


class Scraper:
    """Scrapes a (possibly changing) set of sources into a store."""

    def __init__(
        self,
        store: SnapshotStore,
        sources: Sequence[Source] | SourceProvider,
        settings: ScrapeSettings,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        *,
        max_backoff: float = 30.0,
        rng: random.Random | None = None,
        max_watches: int = MAX_WATCHES,
    ) -> None:
        self._store = store
        self._provider: SourceProvider = sources if callable(sources) else _fixed(list(sources))
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._max_backoff = max(max_backoff, settings.scrape_interval)
        self._rng = rng or random.Random()
        self._limit = asyncio.Semaphore(settings.scrape_concurrency)  # plain scrapes
        self._watch_limit = asyncio.Semaphore(max_watches)  # long-polls wait at the probe, not here
        self._lanes: Lanes | None = None
        self._up: dict[str, bool] = {}
        self._tasks: dict[str, tuple[Source, asyncio.Task[None]]] = {}

    async def scrape_once(self, source: Source, client: httpx.AsyncClient) -> bool:
        """Scrape one target once and record the outcome; never raises (but for cancellation)."""
        async with self._watch_limit if source.long_poll else self._limit:
            started = time.perf_counter()
            deadline = self.deadline(source)
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
                # arrives as the scrape completes, and the loop would then never stop.
                async with asyncio.timeout(deadline):
                    snaps = await source.scrape(client)
            except RankExited as exc:  # gone: the target is down, its last word is kept
                for snap in exc.last_word:
                    self._store.put(snap)
                return self._fail(source, started, exc.reason, str(exc))
            except ScrapeError as exc:
                return self._fail(source, started, exc.reason, str(exc))
            except TimeoutError:
                return self._fail(source, started, Reason.TIMEOUT, f"no answer within {deadline:g}s")
            except Exception as exc:  # a source bug must not kill the loop
                failure = scrape_failure(exc, source.target.location)
                if failure.reason is Reason.INTERNAL and self._up.get(source.target.name, True):
                    log.exception("event=source_error target=%s", source.target.name)
                return self._fail(source, started, failure.reason, str(failure))
            duration = time.perf_counter() - started
        for snap in snaps:
            self._store.put(snap)
        t = source.target
        self._store.record_success(t.name, t.source, duration, self._clock(), t.worker)
        self._transition(source, up=True)
        return True

    async def scrape_all(self, client: httpx.AsyncClient) -> float:
        """One scrape of every current target, concurrently; returns the cycle's wall time."""
        started = time.perf_counter()
        sources = self._provider()
        await asyncio.gather(*(self.scrape_once(s, client) for s in sources))
        self._store.forget_targets(s.target.name for s in sources)
        return time.perf_counter() - started

    def _fail(self, source: Source, started: float, reason: Reason, message: str) -> bool:
        """Record a failure; its message is shown (API, status page, alert text, log) without any
        URL's user, password, path or query, whichever source wrote it, and inert (an error may
        quote what a target sent: :mod:`poolwatch.inert`)."""
        message = inert(scrub_urls(message))
        t = source.target
        self._store.record_failure(t.name, t.source, time.perf_counter() - started, reason, message, t.worker)
        self._transition(source, up=False, reason=reason, message=message)
        return False

    def _transition(
        self, source: Source, *, up: bool, reason: Reason | None = None, message: str = ""
    ) -> None:
        t = source.target
        if self._up.get(t.name) == up:
            return
        self._up[t.name] = up
        if up:
            log.info("event=target_up target=%s source=%s", t.name, t.source)
        else:
            reason_text = reason.value if reason else ""
            log.warning(
                "event=target_down target=%s source=%s reason=%s error=%r",
                t.name,
                t.source,
                reason_text,
                message,
            )

    async def run(self, client: httpx.AsyncClient, lanes: Lanes | None = None) -> None:
        """Scrape every source forever (until cancelled); long-polls go through ``lanes`` when
        given (closed on the way out), else through ``client``."""
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._lanes = lanes
        try:
            while True:
                self._reconcile(client)
                await self._sleep(self._settings.scrape_interval)
        finally:
            for _, task in self._tasks.values():
                task.cancel()
            for source, task in self._tasks.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                source.close()  # a log source lets go of its file (and resumes if run again)
            self._tasks.clear()
            if lanes is not None:
                await lanes.aclose()
            self._lanes = None

    def _reconcile(self, client: httpx.AsyncClient) -> None:
        """Start a task for each new source, stop the tasks of sources that are gone or replaced."""
        current = {s.target.name: s for s in self._provider()}
        for name, (source, task) in list(self._tasks.items()):
            if current.get(name) is not source:
                task.cancel()
                del self._tasks[name]
                source.close()
        for name, source in current.items():
            if name not in self._tasks:
                self._tasks[name] = (
                    source,
                    asyncio.create_task(self._loop(source, client), name=f"scrape {name}"),
                )
        self._store.forget_targets(current)
        for name in [n for n in self._up if n not in current]:
            del self._up[name]

    async def _loop(self, source: Source, client: httpx.AsyncClient) -> None:
        interval = self._settings.scrape_interval
        watching, lanes, name = source.long_poll, self._lanes, source.target.name
        lane = lanes.client(name) if watching and lanes is not None else None
        client = lane or client
        try:
            if not source.last_word_pending():  # a gone rank's final snapshot is read at once
                await self._sleep(self._rng.uniform(0, interval))  # spread the targets over the interval
            failures = 0
            while True:
                failures = 0 if await self.scrape_once(source, client) else failures + 1
                if watching and not failures:
                    await self._sleep(MIN_WATCH_GAP)
                else:
                    watch = watching and failures <= FINAL_WATCH_FAILURES
                    await self.back_off(source, self.delay(failures), watch=watch)
        finally:
            if lanes is not None and lane is not None:
                await lanes.release(name, lane)

    async def back_off(self, source: Source, seconds: float, *, watch: bool = True) -> None:
        """Wait ``seconds`` before the next scrape; with ``watch``, cut short when the source has a
        last word pending (a probe that stopped answering and left its final snapshot, looked for
        every :data:`FINAL_POLL_S`): the page from a dead rank's final snapshot never waits out a
        back-off."""
        if not watch:
            await self._sleep(seconds)
            return
        left = seconds
        while left > 0:
            step = min(FINAL_POLL_S, left)
            await self._sleep(step)
            left -= step
            if source.last_word_pending():
                return

    def deadline(self, source: Source) -> float:
        """How long a scrape may take: ``scrape_timeout``, plus the interval a long-poll may
        wait at the probe before it answers (the wait is not the probe being slow)."""
        extra = self._settings.scrape_interval if source.long_poll else 0.0
        return self._settings.scrape_timeout + extra

    def delay(self, failures: int) -> float:
        """The wait before the next scrape: the interval, doubled per consecutive failure, jittered."""
        base = self._settings.scrape_interval * 2.0 ** max(0, failures - 1)
        return min(base, self._max_backoff) * self._rng.uniform(1 - JITTER, 1 + JITTER)


def _fixed(sources: list[Source]) -> SourceProvider:
    return lambda: sources

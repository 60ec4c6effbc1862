"""The sidecar's ASGI application, built by :func:`create_app` with every dependency injected."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import httpx
from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.registry import Collector

from poolwatch import __version__
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.api import api_router
from poolwatch.sidecar.incidents.api import incidents_router
from poolwatch.sidecar.incidents.file import incidents_path
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.incidents.redact import settings_summary
from poolwatch.sidecar.lanes import Lanes, shared_limits
from poolwatch.sidecar.metrics.collectors import (
    InfoCollector,
    PoolCollector,
    TargetCollector,
)
from poolwatch.sidecar.metrics.discovery import DiscoveryCollector
from poolwatch.sidecar.metrics.exposition import CachedExposition
from poolwatch.sidecar.metrics.route import metrics_router
from poolwatch.sidecar.readiness import readiness_router
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sidecar.supervise import SupervisorCollector
from poolwatch.sources.base import Source
from poolwatch.sources.targets import TargetSet

__all__ = ["build_exposition", "build_registry", "create_app", "process_collector"]

STATIC_DIR = Path(__file__).parent.parent / "static"
STOP_SCRAPER_S = 2.0  # SIGTERM: the scrape loop gets this long to close its lanes, then is left


async def stop_within(task: asyncio.Task[None], seconds: float) -> None:
    """Cancel ``task`` and wait for it at most ``seconds`` (a shutdown never hangs on it)."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        logging.getLogger("poolwatch.sidecar").warning("event=scraper_stop_timeout seconds=%s", seconds)
    elif not task.cancelled() and task.exception() is not None:
        logging.getLogger("poolwatch.sidecar").error("event=scraper_failed error=%r", task.exception())


def process_collector() -> Collector:
    """client_python's ``process_*`` families of this process, read from ``/proc`` on each scrape:
    CPU seconds, resident and virtual memory, open and maximum file descriptors, start time (none
    where there is no ``/proc``).  Registered nowhere by itself: the exposition takes it."""
    return ProcessCollector(registry=None)


def _collectors(
    store: SnapshotStore,
    clock: Callable[[], float],
    stale_after: float,
    extra: Sequence[Collector],
    process: Collector | None,
) -> tuple[PoolCollector, TargetCollector, list[Collector]]:
    """The ranks' collector, the targets' collector, and the rest: ``extra``, build info and
    ``process`` (by default :func:`process_collector`)."""
    rest = [*extra, InfoCollector("poolwatch_build_info", __version__), process or process_collector()]
    return PoolCollector(store, clock, stale_after), TargetCollector(store), rest


def build_registry(
    store: SnapshotStore,
    clock: Callable[[], float],
    stale_after: float,
    extra: Sequence[Collector] = (),
    process: Collector | None = None,
) -> CollectorRegistry:
    """A fresh registry holding poolwatch's collectors, build info and ``process`` (no platform or
    GC defaults): what :func:`build_exposition` renders, collector by collector (the tests'
    uncached reference)."""
    registry = CollectorRegistry()
    pools, targets, rest = _collectors(store, clock, stale_after, extra, process)
    for collector in (pools, targets, *rest):
        registry.register(collector)
    return registry


def build_exposition(
    store: SnapshotStore,
    clock: Callable[[], float],
    stale_after: float,
    extra: Sequence[Collector] = (),
    process: Collector | None = None,
) -> CachedExposition:
    """What :func:`build_registry` exposes, rendered from per-rank blocks cached per snapshot."""
    return CachedExposition(store, *_collectors(store, clock, stale_after, extra, process))


def _provider(
    settings: Settings, sources: Sequence[Source] | None, clock: Callable[[], float]
) -> tuple[Sequence[Source] | Callable[[], Sequence[Source]], list[Collector], TargetSet | None]:
    """The sources the scraper reads (given, or the targets and discovery directory of the
    settings) and, for the latter, the collector of the discovery directory's skipped files and
    the target set (whose directory health the sidecar's own alerts judge)."""
    if sources is not None:
        return list(sources), [], None
    target_set = TargetSet(settings, clock)
    collector = DiscoveryCollector(target_set.skipped_by_reason, target_set.directory_lost)
    return target_set.current, [collector], target_set


def _alerting(alerting: AlertWiring, target_set: TargetSet | None) -> AlertWiring:
    """``alerting``, judging the probe directory the target set scans (its own page when the
    directory is lost or a probe refused: :mod:`poolwatch.detect.families.probe_directory`)."""
    if target_set is not None:
        alerting.directory = target_set.directory_health
    return alerting


def _store(settings: Settings, clock: Callable[[], float]) -> SnapshotStore:
    scrape, fresh = settings.scrape, settings.detection.stale_after
    return SnapshotStore(
        history=scrape.history,
        fresh_within=fresh,
        clock=clock,
        history_budget=scrape.history_budget,
        history_bytes=scrape.history_bytes,
    )


def _incidents(settings: Settings, store: SnapshotStore, clock: Callable[[], float]) -> IncidentLog:
    """The incidents the store's snapshots show, kept beside the alert state file (restored now)."""
    about = {"version": __version__, "settings": settings_summary(settings)}
    incidents = IncidentLog(store, about, incidents_path(settings.alerting.state_file), clock)
    incidents.restore()
    store.subscribe(incidents.observe)
    return incidents


def _lifespan(
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None,
    scraper: Scraper,
    alerting: AlertWiring,
    incidents: IncidentLog,
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """What runs while the app serves: the HTTP client, the scrape loop and alerting, started in
    that order and stopped in reverse (the scrape loop within :data:`STOP_SCRAPER_S`); the
    incidents are saved last."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        limits, timeout = shared_limits(settings.scrape), settings.scrape.scrape_timeout
        async with httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits) as client:
            lanes = Lanes(settings.scrape) if transport is None else None  # one per watched probe
            task = alerting.supervisor.start("poolwatch-scraper", lambda: scraper.run(client, lanes))
            await alerting.start()
            try:
                yield
            finally:
                await stop_within(task, STOP_SCRAPER_S)
                await alerting.stop()
                incidents.flush()

    return lifespan


def create_app(
    settings: Settings,
    *,
    store: SnapshotStore | None = None,
    sources: Sequence[Source] | None = None,
    clock: Callable[[], float] = time.time,
    transport: httpx.AsyncBaseTransport | None = None,
    alerting: AlertWiring | None = None,
    collectors: Sequence[Collector] = (),
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    """Build the sidecar: store, scrape loop and alerting (owned by the lifespan), registry, routes.

    Raises :class:`~poolwatch.errors.ConfigError` for a setting that only shows up as wrong here
    (an unreadable token file, a bad receiver URL)."""
    store = store if store is not None else _store(settings, clock)
    provider, discovery, target_set = _provider(settings, sources, clock)
    scraper = Scraper(store, provider, settings.scrape, clock)
    alerting = _alerting(alerting or build_alerting(settings, store, clock, transport=transport), target_set)
    stale_after = settings.detection.stale_after
    own = [alerting.collector, SupervisorCollector(alerting.supervisor), *discovery]
    if settings.identity.pod:  # who this sidecar serves: Prometheus' pod label must say the same
        own.append(InfoCollector("poolwatch_sidecar_info", settings.identity.pod))
    exposition = build_exposition(store, clock, stale_after, [*own, *collectors])
    incidents = _incidents(settings, store, clock)

    # No /docs, /redoc or /openapi.json: FastAPI's pages load Swagger UI and ReDoc from a CDN, and a
    # monitoring sidecar pulls no third-party script into an operator's browser (issue 24 item 9).
    # The API is documented in README.md; ``app.openapi()`` still builds the schema for tools.
    lifespan = _lifespan(settings, transport, scraper, alerting, incidents)
    app = FastAPI(
        title="poolwatch",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.store, app.state.alerting, app.state.incidents = store, alerting, incidents
    ready = settings.server.ready_requires_data
    own_routers = [
        metrics_router(exposition, clock),
        readiness_router(store, clock, stale_after, alerting.supervisor.crash_looping, requires_data=ready),
        api_router(store, clock, stale_after),
        alerting.router,
        incidents_router(incidents),
    ]
    for router in (*own_routers, *routers):
        app.include_router(router)
    app.mount("/", StaticFiles(directory=STATIC_DIR, html=True, check_dir=False), name="status")
    return app

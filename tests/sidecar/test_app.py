from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from tests.helpers import FIXTURES, asgi_client

from poolwatch.errors import Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.file import FileSource
from rigs.fakes.clock import FakeClock

SETTINGS = Settings.from_env({"POOLWATCH_WORKER": "test"})


def client_for(
    store: SnapshotStore, clock: FakeClock, settings: Settings = SETTINGS
) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
    return asgi_client(create_app(settings, store=store, sources=[], clock=clock))


async def test_metrics_serves_text_by_default_and_openmetrics_when_asked(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    store.put(replace(seed_snapshot, taken_at=clock.now))
    async with client_for(store, clock) as client:
        text = await client.get("/metrics")
        om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert text.headers["content-type"].startswith("text/plain")
    assert 'poolwatch_pool_conservation_gap_slots{dp_rank="0",pool="mamba"' in text.text
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")


READY = {"status": "ready", "crash_looping": []}


async def test_readyz_is_ready_while_it_serves_even_without_data_so_it_never_gates_sglang(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    async with client_for(store, clock) as client:
        assert (await client.get("/readyz")).json() == {**READY, "fresh_ranks": 0}
        store.put(replace(seed_snapshot, taken_at=clock.now))
        assert (await client.get("/readyz")).json() == {**READY, "fresh_ranks": 1}
        clock.advance(60)
        assert (await client.get("/readyz")).json() == {**READY, "fresh_ranks": 0}


async def test_the_opt_in_readiness_gate_waits_for_fresh_data_and_healthz_does_not(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    gated = Settings.from_env({"POOLWATCH_WORKER": "test", "POOLWATCH_READY_REQUIRES_DATA": "true"})
    async with client_for(store, clock, gated) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 503
        store.put(replace(seed_snapshot, taken_at=clock.now))
        assert (await client.get("/readyz")).json() == {**READY, "fresh_ranks": 1}
        clock.advance(60)
        assert (await client.get("/readyz")).status_code == 503


async def test_the_workers_api_gives_findings_and_history(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    store = SnapshotStore()
    store.put(replace(seed_snapshot, taken_at=clock.now))
    async with client_for(store, clock) as client:
        (worker,) = (await client.get("/api/v1/workers")).json()
        history = (await client.get(f"/api/v1/workers/{worker['key']}/history")).json()
        missing = await client.get("/api/v1/workers/nobody/dp0-tp0-pp0/history")
    mamba = next(f for f in worker["findings"] if f["pool"] == "mamba")
    assert (mamba["balance"], mamba["gap"], mamba["slots"]) == ("surplus", -1, 1)
    assert worker["stale"] is False
    assert [s["seq"] for s in history["snapshots"]] == [seed_snapshot.seq]
    assert missing.status_code == 404


async def test_the_api_is_described_in_openapi_but_no_docs_page_is_served(clock: FakeClock) -> None:
    app = create_app(SETTINGS, store=SnapshotStore(), sources=[], clock=clock)
    paths = app.openapi()["paths"]
    assert {"/api/v1/workers", "/api/v1/workers/{key}/history", "/api/v1/targets", "/readyz"} <= set(paths)
    async with client_for(SnapshotStore(), clock) as client:  # issue 24 item 9: no CDN scripts
        served = [(await client.get(path)).status_code for path in ("/docs", "/redoc", "/openapi.json")]
    assert served == [404, 404, 404]


def scrape(source: FileSource, store: SnapshotStore, clock: FakeClock) -> bool:
    async def once() -> bool:
        async with httpx.AsyncClient() as client:
            return await Scraper(store, [source], SETTINGS.scrape, clock).scrape_once(source, client)

    return asyncio.run(once())


def test_a_snapshot_file_is_read_as_current(clock: FakeClock) -> None:
    store = SnapshotStore()
    source = FileSource(Target("file:seed", "file", str(FIXTURES / "seed-snapshot.json")), clock)
    assert scrape(source, store, clock)
    (snap,) = store.latest()
    assert snap.taken_at == clock.now
    assert store.targets()[0].up


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, Reason.IO),
        (b"{not json", Reason.DECODE),
        (b"\xff\xfe", Reason.DECODE),
        (b'{"schema": "poolwatch.snapshot", "version": 9}', Reason.VERSION),
        (b'{"schema": "x"}', Reason.SCHEMA),
    ],
)
def test_a_broken_snapshot_file_is_a_failure_by_reason(
    tmp_path: Path, clock: FakeClock, content: bytes | None, reason: Reason
) -> None:
    path = tmp_path / "snap.json"
    if content is not None:
        path.write_bytes(content)
    store = SnapshotStore()
    assert not scrape(FileSource(Target("file:x", "file", str(path)), clock), store, clock)
    (target,) = store.targets()
    assert not target.up
    assert dict(target.errors) == {reason: 1}
    assert target.last_error


def test_a_file_over_the_size_cap_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 4096)
    store = SnapshotStore()
    assert not scrape(FileSource(Target("file:big", "file", str(path)), clock, max_bytes=1024), store, clock)
    assert dict(store.targets()[0].errors) == {Reason.TOO_LARGE: 1}

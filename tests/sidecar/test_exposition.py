"""The cached /metrics exposition: byte for byte what the plain collectors render, gzip when asked."""

from __future__ import annotations

from dataclasses import replace

from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from tests.helpers import asgi_client
from tests.sidecar.seeded import GOLDEN, PROCESS_FAMILIES, FrozenProcess, pinned, seed_store
from tests.strategies import overlapping_snapshots

from poolwatch.errors import Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import build_exposition, build_registry, create_app
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
steps = st.lists(st.tuples(overlapping_snapshots, st.floats(0, 20), st.booleans()), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_the_cached_render_equals_the_uncached_one_after_every_change(
    changes: list[tuple[Snapshot, float, bool]],
) -> None:
    clock = FakeClock(1_761_907_200.0)
    store = SnapshotStore()
    process = FrozenProcess()
    registry = build_registry(store, clock, 10.0, process=process)
    cached = build_exposition(store, clock, 10.0, process=process)
    for snap, wait, scrape_failed in changes:
        store.put(snap)
        name = f"probe:{snap.worker.worker}"
        if scrape_failed:
            store.record_failure(name, snap.source, 2.0, Reason.TIMEOUT, "no answer")
        else:
            store.record_success(name, snap.source, 0.001, at=clock.now)
        for _ in range(2):  # the second render reuses every block
            assert cached.render(generate_latest, clock()) == generate_latest(registry)
            assert cached.render(generate_openmetrics, clock()) == generate_openmetrics(registry)
        clock.advance(wait)


def test_a_restart_seen_on_a_second_source_renders_the_restart_timestamp(seed_snapshot: Snapshot) -> None:
    # found by the property test above: the probe's snapshot stays the rank's view while the
    # sglang-metrics source reports a new boot; the cached block must still gain the restart time
    clock = FakeClock(1_761_907_200.0)
    store = SnapshotStore(clock=clock)
    process = FrozenProcess()
    registry = build_registry(store, clock, 10.0, process=process)
    cached = build_exposition(store, clock, 10.0, process=process)
    probe = replace(seed_snapshot, source="probe", boot_id="a", taken_at=clock.now)
    coarse = replace(seed_snapshot, source="sglang-metrics", boot_id="a", taken_at=clock.now)
    for snap in (probe, coarse, replace(coarse, boot_id="b", seq=1)):
        store.put(snap)
        clock.advance(1.0)
        assert cached.render(generate_latest, clock()) == generate_latest(registry)
    assert b"poolwatch_rank_restart_timestamp_seconds{" in cached.render(generate_latest, clock())


def test_a_rank_whose_snapshot_did_not_change_is_not_rendered_again(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = seed_store(seed_snapshot, clock)
    cached = build_exposition(store, clock, 10.0)
    cached.render(generate_latest, clock())
    clock.advance(1)
    cached.render(generate_latest, clock())
    assert cached.rendered_ranks == 1
    store.put(replace(seed_snapshot, seq=seed_snapshot.seq + 1, taken_at=clock.now))
    cached.render(generate_latest, clock())
    assert cached.rendered_ranks == 2


def test_the_cached_render_of_the_seed_is_the_golden_exposition(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    cached = build_exposition(seed_store(seed_snapshot, clock), clock, 10.0)
    assert pinned(cached.render(generate_latest, clock()).decode()) == GOLDEN.read_text()


def test_the_render_follows_the_encoder_that_choose_encoder_picks(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = seed_store(seed_snapshot, clock)
    process = FrozenProcess()
    cached = build_exposition(store, clock, 10.0, process=process)
    registry = build_registry(store, clock, 10.0, process=process)
    for accept in ("", OPENMETRICS, "text/plain; version=1.0.0; escaping=underscores"):
        encoder, _ = choose_encoder(accept)
        assert cached.render(encoder, clock()) == encoder(registry)


def seed_app(seed: Snapshot, clock: FakeClock) -> FastAPI:
    """The sidecar's app with the seed snapshot, taken now, in its store."""
    store = SnapshotStore()
    store.put(replace(seed, taken_at=clock.now))
    return create_app(Settings.from_env({"POOLWATCH_WORKER": "test"}), store=store, sources=[], clock=clock)


async def test_metrics_is_gzipped_when_the_scraper_accepts_gzip_and_plain_otherwise(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    async with asgi_client(seed_app(seed_snapshot, clock)) as client:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
        om = await client.get("/metrics", headers={"Accept-Encoding": "gzip", "Accept": OPENMETRICS})
    assert "content-encoding" not in plain.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert pinned(zipped.text) == pinned(plain.text)  # httpx inflates it; the process's figures move
    assert zipped.num_bytes_downloaded < len(plain.content) / 3
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")


async def test_the_served_metrics_carry_the_sidecar_process_figures(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    async with asgi_client(seed_app(seed_snapshot, clock)) as client:
        text = (await client.get("/metrics")).text
        om = (await client.get("/metrics", headers={"Accept": OPENMETRICS})).text
    typed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE process_")}
    assert {name.removesuffix("_total") for name in typed} >= PROCESS_FAMILIES - {"process_cpu_seconds"}
    assert "process_cpu_seconds_total " in text
    assert "# TYPE process_cpu_seconds counter" in om

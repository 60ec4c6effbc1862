"""The cached /metrics exposition: byte for byte what the plain collectors render, gzip when asked."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from tests.helpers import FakeClock, asgi_client
from tests.sidecar.test_exporter import GOLDEN, seed_store

from poolwatch.errors import Reason
from poolwatch.model import (
    Exactness,
    Incident,
    IncidentKind,
    Phase,
    Pool,
    PoolAccount,
    ProbeHealth,
    Role,
    Snapshot,
    Tripwire,
    TripwireKind,
    WorkerId,
)
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import build_exposition, build_registry, create_app
from poolwatch.sidecar.store import SnapshotStore

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
count = st.none() | st.integers(min_value=-(2**41), max_value=2**41)
label = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)

accounts = st.builds(
    PoolAccount,
    pool=st.sampled_from(Pool),
    size=count,
    available=count,
    evictable=count,
    protected=count,
    held=count,
    session_held=count,
    used=count,
    exactness=st.sampled_from(Exactness),
)
snapshots = st.builds(
    Snapshot,
    worker=st.builds(
        WorkerId,
        worker=st.sampled_from(["prefill-0", "decode-1", 'odd"\\name\n']),
        role=st.sampled_from(Role),
        dp_rank=st.integers(0, 2),
        tp_rank=st.integers(0, 2),
        model=label,
    ),
    seq=st.integers(0, 2**40),
    taken_at=st.floats(min_value=1_761_907_000.0, max_value=1_761_907_300.0),
    phase=st.sampled_from(Phase),
    pools=st.lists(accounts, max_size=4).map(lambda xs: {a.pool: a for a in xs}),
    source=st.sampled_from(["probe", "sglang-metrics", "file"]),
    queues=st.dictionaries(st.sampled_from(["waiting", "running", "inflight"]), st.integers(0, 9000)),
    tripwires=st.lists(
        st.builds(
            Tripwire,
            kind=st.sampled_from(TripwireKind),
            pool=st.sampled_from(Pool),
            slots=st.lists(st.integers(0, 500), max_size=3).map(tuple),
        ),
        max_size=2,
    ).map(tuple),
    incidents=st.lists(
        st.builds(Incident, kind=st.sampled_from(IncidentKind), message=label, at=st.just(0.0)), max_size=1
    ).map(tuple),
    probe=st.none() | st.builds(ProbeHealth, samples_total=st.integers(0, 10**9)),
    idle_check_strict=st.none() | st.booleans(),
    boot_id=st.sampled_from(["a", "b"]),
)
steps = st.lists(st.tuples(snapshots, st.floats(0, 20), st.booleans()), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_the_cached_render_equals_the_uncached_one_after_every_change(
    changes: list[tuple[Snapshot, float, bool]],
) -> None:
    clock = FakeClock(1_761_907_200.0)
    store = SnapshotStore()
    registry = build_registry(store, clock, 10.0)
    cached = build_exposition(store, clock, 10.0)
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
    registry = build_registry(store, clock, 10.0)
    cached = build_exposition(store, clock, 10.0)
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
    assert cached.render(generate_latest, clock()).decode() == GOLDEN.read_text()


def test_the_render_follows_the_encoder_that_choose_encoder_picks(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = seed_store(seed_snapshot, clock)
    cached, registry = build_exposition(store, clock, 10.0), build_registry(store, clock, 10.0)
    for accept in ("", OPENMETRICS, "text/plain; version=1.0.0; escaping=underscores"):
        encoder, _ = choose_encoder(accept)
        assert cached.render(encoder, clock()) == encoder(registry)


async def test_metrics_is_gzipped_when_the_scraper_accepts_gzip_and_plain_otherwise(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = SnapshotStore()
    store.put(replace(seed_snapshot, taken_at=clock.now))
    app = create_app(Settings.from_env({"POOLWATCH_WORKER": "test"}), store=store, sources=[], clock=clock)
    async with asgi_client(app) as client:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
        om = await client.get("/metrics", headers={"Accept-Encoding": "gzip", "Accept": OPENMETRICS})
    assert "content-encoding" not in plain.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.text == plain.text  # httpx inflates it
    assert zipped.num_bytes_downloaded < len(plain.content) / 3
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from tests.helpers import require_tool
from tests.sidecar.seeded import GOLDEN, PROCESS_FAMILIES, pinned, seed_store

from poolwatch.catalog.metrics import CATALOG
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import IncidentKind, Phase, Pool
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

RANK = {"worker": "qwen3-next-prefill-0", "role": "prefill", "dp_rank": "0", "tp_rank": "0", "pp_rank": "0"}
MAMBA, FULL = {**RANK, "pool": "mamba"}, {**RANK, "pool": "full"}
GONE = {"target": "probe:gone", "source": "probe", "worker": ""}


def render(store: SnapshotStore, clock: FakeClock, stale_after: float = 10.0) -> str:
    return generate_latest(build_registry(store, clock, stale_after)).decode()


def sample_names(registry: CollectorRegistry) -> set[str]:
    """The names of every sample the registry collects now."""
    return {s.name for family in registry.collect() for s in family.samples}


def test_the_seed_exports_a_mamba_gap_of_minus_one(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    registry = build_registry(seed_store(seed_snapshot, clock), clock, 10.0)
    assert registry.get_sample_value("poolwatch_pool_conservation_gap_slots", MAMBA) == -1
    assert registry.get_sample_value("poolwatch_pool_conservation_gap_slots", FULL) == 0
    assert registry.get_sample_value("poolwatch_pool_slots", {**MAMBA, "state": "evictable"}) == 4
    assert registry.get_sample_value("poolwatch_target_up", GONE) == 0
    errors = registry.get_sample_value("poolwatch_target_scrape_errors_total", {**GONE, "reason": "timeout"})
    assert errors == 1


def test_the_exposition_matches_the_golden_file(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    text = pinned(render(seed_store(seed_snapshot, clock), clock))
    if os.environ.get("POOLWATCH_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_promtool_accepts_the_golden_exposition() -> None:
    promtool = require_tool("promtool")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True, check=False
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_openmetrics_output_parses(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    text = generate_openmetrics(build_registry(seed_store(seed_snapshot, clock), clock, 10.0)).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"poolwatch_pool_conservation_gap_slots", "poolwatch_target_scrape_errors"} <= names


def test_a_stale_rank_keeps_its_last_findings_but_withholds_its_slot_figures(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    store = seed_store(seed_snapshot, clock)
    clock.advance(30)
    registry = build_registry(store, clock, 10.0)
    assert registry.get_sample_value("poolwatch_snapshot_stale", RANK) == 1
    assert registry.get_sample_value("poolwatch_snapshot_age_seconds", RANK) == pytest.approx(30.5)
    # a dead worker's double free is not healthy: the rule and the dashboard still see it
    assert registry.get_sample_value("poolwatch_pool_conservation_gap_slots", MAMBA) == -1
    assert registry.get_sample_value("poolwatch_pool_capacity_slots", MAMBA) == 476
    assert registry.get_sample_value("poolwatch_idle_check_strict", RANK) == 1
    withheld = {"poolwatch_pool_slots", "poolwatch_pool_used_slots", "poolwatch_queue_requests"}
    assert not withheld & sample_names(registry)


def test_probe_health_and_tripwires_are_exported(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    trip = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (17,), "process_prefill_chunk", 812)
    snap = replace(
        seed_snapshot,
        taken_at=clock.now,
        phase=Phase.BUSY,
        tripwires=(trip,),
        probe=ProbeHealth(samples_total=9, errors_total=1, sample_cost_seconds=2e-5),
    )
    store = SnapshotStore()
    store.put(snap)
    registry = build_registry(store, clock, 10.0)
    trips = {**MAMBA, "kind": "free_and_live"}
    assert registry.get_sample_value("poolwatch_pool_tripwire_slots", trips) == 1
    assert registry.get_sample_value("poolwatch_probe_errors_total", RANK) == 1
    assert registry.get_sample_value("poolwatch_worker_idle", RANK) == 0


def test_every_exported_family_is_in_the_catalogue(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    registry = build_registry(seed_store(seed_snapshot, clock), clock, 10.0)
    exported = {family.name for family in registry.collect()}
    # prometheus_client names a counter's family without its _total suffix
    catalogued = {spec.name for spec in CATALOG}
    assert {n if n in catalogued else f"{n}_total" for n in exported} <= catalogued


def test_the_sidecar_exports_its_process_figures_like_every_exporter(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    registry = build_registry(seed_store(seed_snapshot, clock), clock, 10.0)
    assert {family.name for family in registry.collect()} >= PROCESS_FAMILIES
    rss = registry.get_sample_value("process_resident_memory_bytes")
    assert rss is not None
    assert rss > 1 << 20
    open_fds = registry.get_sample_value("process_open_fds")
    max_fds = registry.get_sample_value("process_max_fds")
    assert open_fds is not None
    assert max_fds is not None
    assert 3 <= open_fds <= max_fds
    started = registry.get_sample_value("process_start_time_seconds")
    assert started is not None
    assert started <= time.time()
    assert (registry.get_sample_value("process_cpu_seconds_total") or 0) > 0


def test_catalogue_names_follow_prometheus_conventions() -> None:
    for spec in CATALOG:
        assert spec.name.startswith("process_" if spec.standard else "poolwatch_"), spec.name
        assert ":" not in spec.name
        assert spec.name.endswith("_total") == (spec.kind.value == "counter"), spec.name
        if spec.unit:
            assert spec.name.endswith(f"_{spec.unit}") or f"_{spec.unit}_" in spec.name, spec.name


def test_the_readme_table_is_generated_from_the_catalogue() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for spec in CATALOG:
        assert f"`{spec.name}`" in readme


def test_a_crash_exports_its_time_and_the_restart_after_it_exports_the_new_boot(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", clock.now + 600)
    store = SnapshotStore(clock=clock)  # times are the store's clock: the log's may run ahead
    store.put(replace(seed_snapshot, taken_at=clock.now, incidents=(crash,), boot_id="boot-1"))
    registry = build_registry(store, clock, 10.0)
    last = {**RANK, "kind": "scheduler_exception"}
    read_at = clock.now
    assert registry.get_sample_value("poolwatch_incident_last_timestamp_seconds", last) == read_at
    assert registry.get_sample_value("poolwatch_rank_restart_timestamp_seconds", RANK) is None
    clock.advance(25)
    store.put(replace(seed_snapshot, seq=1, taken_at=clock.now, boot_id="boot-2"))
    assert registry.get_sample_value("poolwatch_rank_restart_timestamp_seconds", RANK) == read_at + 25
    assert registry.get_sample_value("poolwatch_incidents_total", last) == 1

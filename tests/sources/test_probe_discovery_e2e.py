"""End to end on loopback: emulated ranks with the real in-process probe, found through the
discovery directory, scraped by the scrape loop into the store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolwatch.conservation import assess_snapshot, describe
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Exactness, Pool
from poolwatch.probe.lifecycle import detach
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.targets import TargetSet

emulator = pytest.importorskip("poolwatch_emulator")
scenarios = pytest.importorskip("tests.emulator.emu_scenarios")


@pytest.fixture
def seed_cluster(tmp_path: Path) -> Iterator[Any]:
    """A 0.5.4.post1 PD pair with the seed's double free and a probe on every rank."""
    c = scenarios.cluster("0.5.4.post1", faults=("pd-chunked-mamba-double-free",))
    emulator.attach_probes(c, tmp_path)
    yield c
    for rank in c.schedulers:
        detach(rank)
    c.stop()


async def test_discovered_probes_report_the_seed_double_free_exactly(
    seed_cluster: Any, tmp_path: Path
) -> None:
    settings = Settings.from_env({"POOLWATCH_PROBE_DIR": str(tmp_path), "POOLWATCH_WORKER": "sidecar-pod"})
    store = SnapshotStore()
    loop = Scraper(store, TargetSet(settings, time.time).current, settings.scrape)
    async with httpx.AsyncClient(timeout=5.0) as client:
        for _ in range(100):
            seed_cluster.run_steps(50)
            await loop.scrape_all(client)
            prefill = store.get("prefill-0/dp0-tp0-pp0")
            if prefill is not None and prefill.tripwires:
                break
    assert {t.name: t.up for t in store.targets()} == {
        "probe:prefill-0/dp0-tp0-pp0": True,
        "probe:decode-0/dp0-tp0-pp0": True,
    }
    assert prefill is not None
    assert prefill.source == "probe"
    assert prefill.pools[Pool.MAMBA].exactness is Exactness.EXACT
    assert TripwireKind.FREE_AND_LIVE in {t.kind for t in prefill.tripwires}
    assert describe(assess_snapshot(prefill)).startswith("mamba: surplus of 1 slot (double free)")
    assert store.get("decode-0/dp0-tp0-pp0") is not None  # the other worker keeps its own key

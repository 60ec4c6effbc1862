"""Each rank's findings are assessed once, when its snapshot is stored: the detector, the
exporter, the API, ``check``'s verdict and the long-poll signature all read that one memo."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TypeVar

import httpx
from fastapi import FastAPI
from prometheus_client import generate_latest

from poolwatch.catalog.spec import RANK_LABELS, rank_label_values
from poolwatch.conservation import Finding, assess_snapshot, describe, findings, signature
from poolwatch.detect.alert import rank_labels
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.rank import Phase, PoolAccount
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.api import api_router
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.metrics.collectors import rank_labels as exporter_rank_labels
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

T = TypeVar("T")


def counted(snap: Snapshot, computed: Counter[str]) -> Snapshot:
    """``snap`` as a snapshot that counts in ``computed`` every value derived from it (the pools'
    findings are memoised through :meth:`Snapshot.derived`); a ``replace()`` of it counts anew."""

    class Counted(Snapshot):
        __slots__ = ()

        def derived(self, key: str, compute: Callable[[], T]) -> T:
            def counting() -> T:
                computed[key] += 1
                return compute()

            return super().derived(key, counting)

    return Counted(**{f.name: getattr(snap, f.name) for f in fields(snap) if f.init})


async def test_every_consumer_of_a_stored_snapshot_reads_one_assessment(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    computed: Counter[str] = Counter()
    store = SnapshotStore()
    detector = Detector(DetectorConfig(), clock)
    store.subscribe(detector.observe)
    snap = counted(replace(seed_snapshot, taken_at=clock.now), computed)
    assert computed == {}
    store.put(snap)
    assert computed == {"findings": 1, "footprint": 1}  # at store.put, before any reader (its weight too)

    detector.evaluate(latest=store.latest(), targets=store.targets())
    generate_latest(build_registry(store, clock, 10.0))
    app = FastAPI()
    app.include_router(api_router(store, clock, 10.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://sidecar") as client:
        workers = (await client.get("/api/v1/workers")).json()
    verdict, sig = describe(assess_snapshot(snap)), signature(snap)

    assert computed == {"findings": 1, "footprint": 1}
    assert "mamba: surplus of 1 slot (double free)" in verdict
    assert sig
    assert workers


def test_a_replaced_snapshot_is_assessed_afresh(seed_snapshot: Snapshot) -> None:
    mamba = next(a for a in seed_snapshot.pools.values() if a.pool.value == "mamba")
    before = findings(seed_snapshot)[mamba.pool]
    fixed: PoolAccount = replace(mamba, available=(mamba.available or 0) - before.slots)
    after = replace(seed_snapshot, pools={**seed_snapshot.pools, mamba.pool: fixed}, phase=Phase.IDLE)
    assert findings(after)[mamba.pool] != before
    assert isinstance(findings(after)[mamba.pool], Finding)


def test_rank_labels_come_from_one_function_in_catalogue_order(seed_snapshot: Snapshot) -> None:
    worker = seed_snapshot.worker
    values = rank_label_values(worker)
    assert exporter_rank_labels(seed_snapshot) == values
    assert dict(rank_labels(worker)) == dict(zip(RANK_LABELS, values, strict=True))
    assert values[:2] == (worker.worker, worker.role.value)

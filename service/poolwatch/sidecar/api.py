"""The JSON API of the sidecar: latest snapshots per rank, their history and target health."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from poolwatch.codec import dump_snapshot
from poolwatch.conservation import assess_snapshot
from poolwatch.model import Snapshot
from poolwatch.sidecar.store import SnapshotStore, TargetState

__all__ = ["api_router"]


class FindingView(BaseModel):
    pool: str
    balance: str
    gap: int | None
    basis: str
    slots: int


class WorkerView(BaseModel):
    key: str
    worker: dict[str, Any]
    age_seconds: float
    stale: bool
    findings: list[FindingView]
    snapshot: dict[str, Any]


class HistoryView(BaseModel):
    key: str
    snapshots: list[dict[str, Any]]


class TargetView(BaseModel):
    name: str
    source: str
    up: bool
    scrapes: int
    last_duration_seconds: float
    last_success_at: float | None
    last_error: str
    errors: dict[str, int]


def worker_view(snap: Snapshot, now: float, stale_after: float) -> WorkerView:
    doc = dump_snapshot(snap)
    age = max(0.0, now - snap.taken_at)
    findings = [
        FindingView(pool=f.pool.value, balance=f.balance.value, gap=f.gap, basis=f.basis.value, slots=f.slots)
        for f in assess_snapshot(snap)
    ]
    return WorkerView(
        key=snap.worker.key,
        worker=doc["worker"],
        age_seconds=age,
        stale=age > stale_after,
        findings=findings,
        snapshot=doc,
    )


def target_view(t: TargetState) -> TargetView:
    return TargetView(
        name=t.name,
        source=t.source,
        up=t.up,
        scrapes=t.scrapes,
        last_duration_seconds=t.last_duration,
        last_success_at=t.last_success_at,
        last_error=t.last_error,
        errors={r.value: n for r, n in sorted(t.errors.items())},
    )


def api_router(store: SnapshotStore, clock: Callable[[], float], stale_after: float) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["api"])

    @router.get("/workers", summary="Latest snapshot and findings of every rank")
    def workers() -> list[WorkerView]:
        now = clock()
        return [worker_view(s, now, stale_after) for s in store.latest()]

    @router.get("/workers/{key:path}/history", summary="Recent snapshots of one rank, oldest first")
    def history(key: str) -> HistoryView:
        snaps = store.history(key)
        if not snaps:
            raise HTTPException(status_code=404, detail=f"no rank {key!r}")
        return HistoryView(key=key, snapshots=[dump_snapshot(s) for s in snaps])

    @router.get("/targets", summary="Health of every scrape target")
    def targets() -> list[TargetView]:
        return [target_view(t) for t in store.targets()]

    return router

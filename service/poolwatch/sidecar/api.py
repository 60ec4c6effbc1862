"""The JSON API of the sidecar: each rank's view and what each of its sources says, history, target health.

Every finding names the source it came from (``probe``: exact; ``sglang-metrics`` / ``sglang-log``:
coarse), so a reader can tell a proof from an estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import assess_snapshot
from poolwatch.model.rank import IncidentKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.target_state import TargetState

__all__ = ["api_router"]


class FindingView(BaseModel):
    pool: str
    balance: str
    gap: int | None
    basis: str
    slots: int
    source: str


class SourceView(BaseModel):
    """One source's latest word on the rank."""

    source: str
    age_seconds: float
    stale: bool
    phase: str
    findings: list[FindingView]


class WorkerView(BaseModel):
    key: str
    worker: dict[str, Any]
    age_seconds: float
    stale: bool
    source: str  # the source whose figures speak for the rank (the most exact fresh one)
    findings: list[FindingView]
    snapshot: dict[str, Any]
    sources: list[SourceView]
    incidents: dict[str, int]


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


def _findings(snap: Snapshot) -> list[FindingView]:
    return [
        FindingView(
            pool=f.pool.value,
            balance=f.balance.value,
            gap=f.gap,
            basis=f.basis.value,
            slots=f.slots,
            source=snap.source,
        )
        for f in assess_snapshot(snap)
    ]


def source_view(snap: Snapshot, now: float, stale_after: float) -> SourceView:
    age = max(0.0, now - snap.taken_at)
    return SourceView(
        source=snap.source,
        age_seconds=age,
        stale=age > stale_after,
        phase=snap.phase.value,
        findings=_findings(snap),
    )


def worker_view(
    snap: Snapshot,
    now: float,
    stale_after: float,
    sources: Sequence[Snapshot] = (),
    incidents: Mapping[IncidentKind, int] | None = None,
) -> WorkerView:
    """``snap``: the rank's view; ``sources``: every source's latest (default: the view alone)."""
    doc = dump_snapshot(snap)
    age = max(0.0, now - snap.taken_at)
    return WorkerView(
        key=snap.worker.key,
        worker=doc["worker"],
        age_seconds=age,
        stale=age > stale_after,
        source=snap.source,
        findings=_findings(snap),
        snapshot=doc,
        sources=[source_view(s, now, stale_after) for s in (sources or (snap,))],
        incidents={k.value: n for k, n in sorted((incidents or {}).items())},
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
        return [
            worker_view(s, now, stale_after, store.sources(s.worker.key), store.incident_counts(s.worker.key))
            for s in store.latest()
        ]

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

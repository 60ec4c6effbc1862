"""``GET /healthz`` (alive: the process answers) and ``GET /readyz`` (ready: it serves; opt-in,
and has fresh data).

A native sidecar's readiness counts toward the pod's, so by default poolwatch is ready once it
serves and never takes the engine out of its Service; freshness is a metric and an alert instead.
With ``ready_requires_data`` it is not ready while no rank has fresh data or a background task is
crash-looping; ``crash_looping`` always lists such tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from poolwatch.sidecar.store import SnapshotStore

__all__ = ["readiness_router"]


def readiness_router(
    store: SnapshotStore,
    clock: Callable[[], float],
    stale_after: float,
    crash_looping: Callable[[], Sequence[str]],
    *,
    requires_data: bool,
) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", summary="Liveness: the process answers")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", summary="Readiness: the sidecar serves (opt-in: and has fresh data)")
    def readyz() -> JSONResponse:
        now = clock()
        fresh = sum(1 for s in store.latest() if now - s.taken_at <= stale_after)
        looping = list(crash_looping())
        if requires_data and looping:
            reason = f"crash-looping: {', '.join(looping)}"
            return JSONResponse({"status": "not ready", "reason": reason, "crash_looping": looping}, 503)
        if fresh or not requires_data:
            return JSONResponse({"status": "ready", "fresh_ranks": fresh, "crash_looping": looping})
        return JSONResponse({"status": "not ready", "reason": "no rank has fresh data"}, status_code=503)

    return router

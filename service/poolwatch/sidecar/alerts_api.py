"""``GET /api/v1/alerts``: what the detector holds, newest first within each state."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from poolwatch.detect.alert import Alert, AlertState

__all__ = ["AlertView", "alerts_router"]

_ORDER = {AlertState.FIRING: 0, AlertState.PENDING: 1, AlertState.RESOLVED: 2}


class AlertView(BaseModel):
    name: str
    state: str
    severity: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float
    active_since: float
    fired_at: float | None
    resolved_at: float | None
    last_seen: float


def alert_view(a: Alert) -> AlertView:
    return AlertView(
        name=a.name,
        state=a.state.value,
        severity=a.severity.value,
        labels=a.all_labels,
        annotations=dict(a.annotations),
        value=a.value,
        active_since=a.active_since,
        fired_at=a.fired_at,
        resolved_at=a.resolved_at,
        last_seen=a.last_seen,
    )


def alerts_router(source: Callable[[], Sequence[Alert]]) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["alerts"])

    @router.get("/alerts", summary="Pending, firing and recently resolved alerts")
    def alerts(state: str | None = None) -> list[AlertView]:
        if state is not None and state not in {s.value for s in AlertState}:
            raise HTTPException(
                status_code=400, detail=f"state must be pending, firing or resolved, not {state!r}"
            )
        chosen = [a for a in source() if state is None or a.state.value == state]
        chosen.sort(key=lambda a: (_ORDER[a.state], -(a.fired_at or a.active_since), a.fingerprint))
        return [alert_view(a) for a in chosen]

    return router

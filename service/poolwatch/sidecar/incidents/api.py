"""The incident routes of the sidecar's JSON API: read-only, as every ``/api/v1`` route is.

* ``GET /api/v1/incidents``: one line per incident, newest first (id, rank, kind, pool, count,
  engine and release, when, the call site);
* ``GET /api/v1/incidents/{id}``: the JSON bundle (:func:`~poolwatch.sidecar.incidents.export.bundle_json`);
* ``GET /api/v1/incidents/{id}/bundle.md``: the Markdown bundle.

They are served to whoever reaches the sidecar's API (docs/security.md): the list names the rank
(the operator's view, as ``/api/v1/workers`` does); a bundle names no worker, pod or request
(:mod:`~poolwatch.sidecar.incidents.redact`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import PlainTextResponse

from poolwatch.sidecar.incidents.export import bundle_json, bundle_markdown
from poolwatch.sidecar.incidents.log import IncidentLog
from poolwatch.sidecar.incidents.record import INCIDENT_ID

__all__ = ["incidents_router"]


def incidents_router(incidents: IncidentLog) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["incidents"])

    def body(ident: str) -> dict[str, Any]:
        found = incidents.bundle(ident) if INCIDENT_ID.fullmatch(ident) else None
        if found is None:
            raise HTTPException(status_code=404, detail="no such incident")
        return found

    @router.get("/incidents", summary="Every incident this sidecar has seen, newest first")
    def listed() -> list[dict[str, Any]]:
        return incidents.listed()

    @router.get("/incidents/{ident}", summary="One incident's bundle (JSON)")
    def bundle(ident: str) -> dict[str, Any]:
        return bundle_json(body(ident))

    @router.get("/incidents/{ident}/bundle.md", summary="One incident's bundle (Markdown)")
    def markdown(ident: str) -> PlainTextResponse:
        return PlainTextResponse(bundle_markdown(body(ident)), media_type="text/markdown; charset=utf-8")

    return router

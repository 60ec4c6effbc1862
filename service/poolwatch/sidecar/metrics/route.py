"""``GET /metrics``: the cached exposition, in the format the scraper asks for (OpenMetrics when its
``Accept`` says so, the text format otherwise or when the header cannot be parsed), gzip-compressed
when it accepts that.  A plain route on our own registry, not ``make_asgi_app()`` mounted at
``/metrics`` (which redirects to ``/metrics/``: client_python #1016)."""

from __future__ import annotations

import gzip
from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from prometheus_client.exposition import choose_encoder, gzip_accepted

from poolwatch.sidecar.metrics.exposition import CachedExposition

__all__ = ["GZIP_LEVEL", "metrics_router"]

GZIP_LEVEL = 1  # /metrics compresses ~10x at level 1; higher levels cost more CPU than they save


def metrics_router(exposition: CachedExposition, clock: Callable[[], float]) -> APIRouter:
    router = APIRouter()

    @router.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        try:
            encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        except (ValueError, TypeError):  # an Accept the library cannot parse: the plain text format
            encoder, content_type = choose_encoder("")
        body = exposition.render(encoder, clock())
        headers = {"Vary": "Accept-Encoding"}
        if gzip_accepted(request.headers.get("accept-encoding", "")):
            body, headers["Content-Encoding"] = gzip.compress(body, compresslevel=GZIP_LEVEL), "gzip"
        return Response(body, media_type=content_type, headers=headers)

    return router

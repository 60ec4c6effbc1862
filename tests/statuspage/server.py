"""The real sidecar app (``create_app``) over a fake store, served on a loopback port in a thread.

The socket is bound and listening before the thread starts, so a browser may connect at once:
the kernel queues the connection until uvicorn accepts it (no readiness wait is needed).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import APIRouter

from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source
from rigs.fakes.clock import FakeClock


@contextmanager
def serve(
    store: SnapshotStore,
    clock: FakeClock,
    routers: Sequence[APIRouter] = (),
    sources: Sequence[Source] = (),
    *,
    without_alert_api: bool = False,
) -> Iterator[str]:
    """Serve the sidecar app on 127.0.0.1; yields its base URL and stops it on exit.

    ``without_alert_api`` drops ``/api/v1/alerts``, as a sidecar built without alerting serves."""
    app: Any = create_app(Settings(), store=store, sources=sources, clock=clock, routers=routers)
    if without_alert_api:
        app = _without(app, "/api/v1/alerts")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="statuspage-server", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _without(app: Any, path: str) -> Any:
    """``app`` answering 404 on ``path`` (an ASGI wrapper; lifespan and other paths pass through)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == path:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapped

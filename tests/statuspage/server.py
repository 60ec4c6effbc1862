"""The real sidecar app (``create_app``) over a fake store, served on a loopback port in a thread.

The socket is bound and listening before the thread starts, so a browser may connect at once:
the kernel queues the connection until uvicorn accepts it (no readiness wait is needed).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import uvicorn
from fastapi import APIRouter
from tests.helpers import FakeClock

from poolwatch.app import create_app
from poolwatch.settings import Settings
from poolwatch.sources import Source
from poolwatch.store import SnapshotStore


@contextmanager
def serve(
    store: SnapshotStore, clock: FakeClock, routers: Sequence[APIRouter] = (), sources: Sequence[Source] = ()
) -> Iterator[str]:
    """Serve the sidecar app on 127.0.0.1; yields its base URL and stops it on exit."""
    app = create_app(Settings(), store=store, sources=sources, clock=clock, routers=routers)
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

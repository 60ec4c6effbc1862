"""A fake SGLang HTTP server for the tests that read one without a probe: its two read-only
endpoints (``/metrics``, ``/get_server_info``), from a captured release or given."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
from tests.helpers import FIXTURES

__all__ = ["SGLANG", "Handler", "captured", "sglang_server"]

SGLANG = FIXTURES / "sglang"
Handler = Callable[[httpx.Request], httpx.Response]


def captured(release: str) -> tuple[str, object]:
    """The ``/metrics`` page and the ``/get_server_info`` document captured from ``release``."""
    page = (SGLANG / f"{release}.metrics.txt").read_text()
    info = json.loads((SGLANG / f"{release}.server_info.json").read_text())
    return page, info


def sglang_server(page: str | bytes, info: object, seen: list[str] | None = None) -> Handler:
    """The server answering ``page`` and ``info`` (404 as FastAPI says it for anything else); every
    path asked is appended to ``seen``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request.url.path)
        if request.url.path == "/metrics":
            if isinstance(page, str):
                return httpx.Response(200, text=page)
            return httpx.Response(200, content=page)
        if request.url.path == "/get_server_info":
            return httpx.Response(200, json=info)
        return httpx.Response(404, json={"detail": "Not Found"})

    return handle

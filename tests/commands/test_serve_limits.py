"""The sidecar's HTTP server under a connection flood: idle connections are closed, the cap makes
room for new ones, and /healthz keeps answering (real uvicorn on 127.0.0.1, a small cap)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import uvicorn
from tests.helpers import free_port

from poolwatch.commands import serve
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app


class SmallLimits(serve.GuardedH11):
    """The sidecar's protocol with a cap and head deadline a test reaches in well under a second."""

    max_connections = 20
    head_timeout_s = 0.5


@pytest.fixture
def server() -> Iterator[int]:
    base = Settings.from_env({"POOLWATCH_WORKER": "test"})
    port = free_port()
    settings = replace(base, server=replace(base.server, host="127.0.0.1", port=port, log_level="warning"))
    config = serve.server_config(create_app(settings, sources=[]), settings, http=SmallLimits)
    assert config.access_log is False
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield port
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(100) == b""
    except OSError:
        return True


def test_a_flood_of_idle_connections_is_closed_and_healthz_keeps_answering(server: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", server), timeout=5) for _ in range(60)]
    try:
        assert httpx.get(f"http://127.0.0.1:{server}/healthz", timeout=5).status_code == 200
        assert all(closed_by_server(s) for s in idle)  # none sent a request head in time
    finally:
        for s in idle:
            s.close()


def test_a_trickled_request_head_is_cut_off(server: int) -> None:
    sock = socket.create_connection(("127.0.0.1", server), timeout=5)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    assert closed_by_server(sock)
    sock.close()


def test_an_accept_header_the_library_cannot_parse_gets_the_text_format(server: int) -> None:
    resp = httpx.get(
        f"http://127.0.0.1:{server}/metrics",
        headers={"Accept": "application/openmetrics-text; version=abc"},
        timeout=5,
    )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")


@pytest.mark.slow
def test_sigterm_stops_a_flooded_sidecar_within_a_few_seconds(tmp_path: Path) -> None:
    """A real ``poolwatch serve`` with 300 idle connections open and a client hammering /metrics
    still exits within 10 s of SIGTERM (uvicorn's graceful wait is 3 s, every task's stop 2 s)."""
    port = free_port()
    env = {**os.environ, "POOLWATCH_WORKER": "flood", "POOLWATCH_HOST": "127.0.0.1",
           "POOLWATCH_PORT": str(port), "POOLWATCH_PROBE_DIR": str(tmp_path)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "poolwatch.cli", "serve"], env=env)
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(300)]
        for _ in range(20):
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert time.monotonic() - started < 10
    finally:
        for s in idle:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

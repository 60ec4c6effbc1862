"""Connection admission at the probe's endpoint: a neighbour without the secret cannot keep the
sidecar out, however it holds and re-opens connections.

Before: past the 32 public and 4 reserved places every new connection got a 503 at once, so a
neighbour that held the public places and re-opened the reserved ones as fast as they closed kept
a restarting sidecar out (its back-off then grew to 30 s: 34-45 s without a snapshot).  Now a
connection past every place waits briefly in a pen, and if its first request shows the secret it
takes the place of one that never did (an idle public one first).  Real sockets on 127.0.0.1, a
fake scheduler rank; the hostile tier (tests/hostile/test_hostile_neighbours.py) runs the
neighbour as uid nobody against a real ``poolwatch serve``.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from poolwatch.discovery.auth import sign_request
from poolwatch.discovery.files import read_secret
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.endpoint.conn import PEN_SIZE
from poolwatch.probe.endpoint.server import MAX_OPEN, RESERVED_OPEN
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank
from rigs.neighbours import HOG

PLACES = MAX_OPEN + RESERVED_OPEN


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[tuple[int, str]]:
    rank = Rank()
    config = ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), release="0.5.9", worker="w")
    attached = attach(SGLANG, rank.sched, config)
    rank.sched.recv_requests()
    assert attached.publisher is not None
    assert attached.publisher.server is not None
    secret = read_secret(tmp_path)
    assert secret is not None
    try:
        yield attached.publisher.server.port, secret
    finally:
        detach(rank.sched)


def signed_get(port: int, secret: str, path: str = "/v1/snapshot") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        auth = sign_request(secret, "GET", f"127.0.0.1:{port}", path, time.time())
        conn.request("GET", path, headers={"Authorization": auth})
        return conn.getresponse().status
    finally:
        conn.close()


def silent(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that never send a byte, each accepted before the next is opened."""
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        held.append(s)
    return held


def answered(s: socket.socket) -> bytes:
    s.settimeout(0.05)
    try:
        return s.recv(200)
    except TimeoutError:
        return b""
    finally:
        s.settimeout(10)


def test_a_client_showing_the_secret_takes_the_place_of_the_oldest_idle_public_connection(
    probe: tuple[int, str],
) -> None:
    port, secret = probe
    held = silent(port, PLACES)
    try:
        assert signed_get(port, secret) == 200  # before: 503 (every place taken)
        shed = [i for i, s in enumerate(held) if answered(s).startswith(b"HTTP/1.1 503")]
        assert shed == [0]  # the oldest idle public one, told to retry; no other
    finally:
        for s in held:
            s.close()


def test_past_every_place_a_client_without_the_secret_still_gets_a_503(probe: tuple[int, str]) -> None:
    port, _ = probe
    held = silent(port, PLACES)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 503
        conn.close()
        wrong = "0" * 64
        assert signed_get(port, wrong) == 503  # a signature of another key is no secret shown
        assert [answered(s) for s in held] == [b""] * PLACES  # none shed for them
    finally:
        for s in held:
            s.close()


def test_a_connection_that_showed_the_secret_is_never_shed(probe: tuple[int, str]) -> None:
    port, secret = probe
    keep = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    auth = sign_request(secret, "GET", f"127.0.0.1:{port}", "/healthz", time.time())
    keep.request("GET", "/healthz", headers={"Authorization": auth})
    assert keep.getresponse().read()  # a proven keep-alive connection, now idle
    held = silent(port, PLACES - 1)
    try:
        for _ in range(PLACES):  # every unproven place is shed, one by one; the proven one stays
            assert signed_get(port, secret) == 200
        auth = sign_request(secret, "GET", f"127.0.0.1:{port}", "/healthz", time.time())
        keep.request("GET", "/healthz", headers={"Authorization": auth})
        assert keep.getresponse().status == 200
    finally:
        keep.close()
        for s in held:
            s.close()


def test_connections_past_every_place_wait_their_grace_in_a_bounded_pen_then_get_a_503(
    probe: tuple[int, str],
) -> None:
    port, _ = probe
    held = silent(port, PLACES)
    penned = silent(port, PEN_SIZE + 4)  # the last 4 wait in the kernel's backlog for a spot
    try:
        assert [s.recv(200)[:12] for s in penned] == [b"HTTP/1.1 503"] * (PEN_SIZE + 4)
        assert [answered(s) for s in held] == [b""] * PLACES
    finally:
        for s in (*held, *penned):
            s.close()


@contextlib.contextmanager
def hog(port: int, n: int = 64) -> Iterator[None]:
    """A neighbour without the secret, in a process of its own: ``n`` threads, each holding one
    connection and opening a new one the moment it is closed (never sending a byte)."""
    argv = [sys.executable, "-c", HOG, str(port), str(n)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "holding"
        yield
    finally:
        proc.kill()
        proc.communicate(timeout=10)


async def test_a_restarting_sidecar_gets_its_first_snapshot_on_its_first_scrape_under_a_connection_hog(
    probe: tuple[int, str], clock: FakeClock
) -> None:
    port, secret = probe
    target = Target("probe:w/dp0-tp0-pp0", "probe", f"http://127.0.0.1:{port}", "w")
    store = SnapshotStore()
    settings = ScrapeSettings(scrape_interval=1.0, scrape_timeout=2.0)
    with hog(port):
        for _ in range(3):  # three restarts of the sidecar: each a new connection
            source = ProbeSource(target, long_poll_s=0.5, secret=secret)
            scraper = Scraper(store, [source], settings, clock)
            async with httpx.AsyncClient() as client:
                assert await scraper.scrape_once(source, client)  # before: HTTP 503, then back-off
    (state,) = store.targets()
    assert (state.up, dict(state.errors)) == (True, {})

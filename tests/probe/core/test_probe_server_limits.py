"""The probe's endpoint under hostile clients: fixed threads, bounded long-polls, keep-alive, limits.

Real sockets on 127.0.0.1 against a fake scheduler rank; every wait is bounded by a socket timeout.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from poolwatch.conservation import signature
from poolwatch.discovery.files import read_secret
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.endpoint import server as probe_server
from poolwatch.probe.endpoint.server import ProbeServer
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.sglang import Rank


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[SglangProbe, Rank, int]]:
    rank = Rank()
    config = ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), release="0.5.9", worker="w")
    probe = attach(SGLANG, rank.sched, config)
    rank.sched.recv_requests()
    assert probe.publisher is not None
    assert probe.publisher.server is not None
    try:
        yield probe, rank, probe.publisher.server.port
    finally:
        detach(rank.sched)


def request(
    port: int, path: str, timeout: float = 40, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def until(ready: Callable[[], bool], within: float = 30.0) -> None:
    """Wait for ``ready()``, failing after ``within`` seconds (a long-poll that ended early, on a
    stalled machine, must fail the test, not hang the suite)."""
    deadline = time.monotonic() + within
    while not ready():
        assert time.monotonic() < deadline, "not ready within the bound"
        threading.Event().wait(0.01)


def test_one_keep_alive_connection_serves_many_requests_over_http_1_1(
    served: tuple[SglangProbe, Rank, int],
) -> None:
    _, _, port = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.connect()
    local = conn.sock.getsockname()
    for _ in range(3):
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert (resp.status, resp.version) == (200, 11)
        resp.read()
    assert conn.sock.getsockname() == local  # the same TCP connection all along
    conn.close()


@pytest.mark.parametrize("wait", ["nan", "inf", "-inf", "later"])
def test_a_non_finite_wait_is_refused_with_400(served: tuple[SglangProbe, Rank, int], wait: str) -> None:
    assert request(served[2], f"/v1/snapshot?sig=x&wait={wait}")[0] == 400


def test_extra_long_polls_get_503_at_once_and_a_publish_wakes_the_waiting_ones(
    served: tuple[SglangProbe, Rank, int],
) -> None:
    probe, _, port = served
    assert probe.latest is not None
    seen = signature(probe.latest)
    slots = probe_server.PUBLIC_LONG_POLLS
    answers: list[int] = []
    waiting = [
        threading.Thread(target=lambda: answers.append(request(port, f"/v1/snapshot?sig={seen}&wait=30")[0]))
        for _ in range(slots)
    ]
    for t in waiting:
        t.start()
    until(lambda: probe.publication.waiting >= slots)
    assert request(port, f"/v1/snapshot?sig={seen}&wait=30", timeout=5)[0] == 503  # refused, not queued
    assert request(port, "/healthz", timeout=5)[0] == 200  # one worker is always left for this
    probe.publication.publish(replace(probe.latest, boot_id="restarted"))  # a new signature
    for t in waiting:
        t.join(timeout=10)
    assert answers == [200] * slots


def test_connections_past_the_limit_get_503_and_idle_ones_do_not_add_threads(
    served: tuple[SglangProbe, Rank, int],
) -> None:
    _, _, port = served
    threads_before = threading.active_count()
    held = probe_server.MAX_OPEN + probe_server.RESERVED_OPEN
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(held)]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert extra.recv(200).startswith(b"HTTP/1.1 503")
        extra.close()
        assert threading.active_count() <= threads_before
    finally:
        for s in idle:
            s.close()
    statuses = []
    for _ in range(100):  # closed ones free their places once the probe has seen them close
        statuses.append(request(port, "/healthz")[0])
        if statuses[-1] == 200:
            break
        threading.Event().wait(0.02)
    assert statuses[-1] == 200


def test_a_silent_connection_is_closed_after_the_head_timeout(served: tuple[SglangProbe, Rank, int]) -> None:
    server = ProbeServer(served[0], head_timeout_s=0.2)
    server.start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a head that never ends
        assert sock.recv(100) == b""  # closed by the probe, well before the 10 s socket timeout
        sock.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "head",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nno-colon\r\n\r\n",
        b"GET /x HTTP/1.1\r\n" + b"A: b\r\n" * 5000,
    ],
)
def test_a_malformed_or_huge_head_gets_400_and_the_server_keeps_serving(
    served: tuple[SglangProbe, Rank, int], head: bytes
) -> None:
    sock = socket.create_connection(("127.0.0.1", served[2]), timeout=10)
    sock.sendall(head)
    assert sock.recv(200).startswith(b"HTTP/1.1 400")
    sock.close()
    assert request(served[2], "/healthz")[0] == 200


def test_stopping_the_server_ends_every_thread_even_with_a_long_poll_waiting(tmp_path: Path) -> None:
    before = set(threading.enumerate())  # another test's probe may still be serving in this process
    rank = Rank()
    config = ProbeConfig(sample_interval_s=0.0, directory=str(tmp_path), release="0.5.9", worker="w")
    probe = attach(SGLANG, rank.sched, config)
    rank.sched.recv_requests()
    assert probe.latest is not None
    assert probe.publisher is not None
    assert probe.publisher.server is not None
    port, seen = probe.publisher.server.port, signature(probe.latest)
    poll = threading.Thread(target=lambda: request(port, f"/v1/snapshot?sig={seen}&wait=30"))
    poll.start()
    until(lambda: probe.publication.waiting > 0 or not poll.is_alive())
    detach(rank.sched)
    poll.join(timeout=10)
    assert not poll.is_alive()
    started = [t for t in threading.enumerate() if t not in before]
    assert not [t for t in started if t.name.startswith("poolwatch-probe")]


def hold_long_polls(port: int, seen: str, count: int, answers: list[int]) -> list[threading.Thread]:
    """``count`` hostile long-polls that wait (up to 30 s) until a publish wakes them."""
    threads = [
        threading.Thread(target=lambda: answers.append(request(port, f"/v1/snapshot?sig={seen}&wait=30")[0]))
        for _ in range(count)
    ]
    for t in threads:
        t.start()
    return threads


def test_the_sidecar_that_shows_the_secret_gets_its_long_poll_while_hostile_clients_hold_every_public_one(
    served: tuple[SglangProbe, Rank, int], tmp_path: Path
) -> None:
    probe, _, port = served
    assert probe.latest is not None
    seen, secret = signature(probe.latest), read_secret(tmp_path)
    assert secret is not None
    hostile: list[int] = []
    waiting = hold_long_polls(port, seen, probe_server.PUBLIC_LONG_POLLS, hostile)
    until(lambda: probe.publication.waiting >= probe_server.PUBLIC_LONG_POLLS)
    assert request(port, f"/v1/snapshot?sig={seen}&wait=30", timeout=5)[0] == 503  # an extra: refused
    wrong = {"Authorization": "Bearer " + "0" * len(secret)}
    assert request(port, f"/v1/snapshot?sig={seen}&wait=30", timeout=5, headers=wrong)[0] == 503
    sidecar = {"Authorization": f"Bearer {secret}"}
    assert request(port, "/v1/snapshot?sig=other&wait=30", timeout=5, headers=sidecar)[0] == 200  # at once
    mine: list[int] = []
    watch = threading.Thread(
        target=lambda: mine.append(request(port, f"/v1/snapshot?sig={seen}&wait=30", headers=sidecar)[0])
    )
    watch.start()
    until(lambda: probe.publication.waiting >= probe_server.PUBLIC_LONG_POLLS + 1)
    assert request(port, "/healthz", timeout=5)[0] == 200  # and one worker is still left for this
    probe.publication.publish(replace(probe.latest, boot_id="restarted"))
    for t in [*waiting, watch]:
        t.join(timeout=10)
    assert (mine, hostile) == ([200], [200] * probe_server.PUBLIC_LONG_POLLS)


def test_past_the_public_connection_limit_only_a_client_that_shows_the_secret_is_served(
    served: tuple[SglangProbe, Rank, int], tmp_path: Path
) -> None:
    _, _, port = served
    secret = read_secret(tmp_path)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(probe_server.MAX_OPEN)]
    try:
        # accepted in order from the kernel's backlog: this one is past the public limit
        assert request(port, "/healthz", timeout=5)[0] == 503  # a reserved place, no secret
        status, doc = request(port, "/v1/snapshot", timeout=5, headers={"Authorization": f"Bearer {secret}"})
        assert (status, doc["schema"]) == (200, "poolwatch.snapshot")
    finally:
        for s in idle:
            s.close()

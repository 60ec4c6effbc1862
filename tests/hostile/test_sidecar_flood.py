"""The issue's flood, at full size, against the sidecar as deployed: a real ``poolwatch serve``
(its own connection cap, head and keep-alive timeouts) whose file-descriptor limit is 1,024, and
two waves of 1,100 idle connections on 127.0.0.1.  Meanwhile ``/healthz`` and ``/metrics`` keep
answering, the healthy control target keeps being scraped (its snapshot never goes stale), and no
PoolwatchSnapshotStale is raised, not even pending.

Bounded: two waves, a few seconds each; every request has a timeout.  The test process raises its
own soft descriptor limit (up to the hard one) to hold the connections, and skips if it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.helpers import FIXTURES, free_port
from tests.hostile.sidecar_process import running

WAVE = 1100  # the 1,100 idle connections
SERVER_FDS = 1024  # ... against a process limited to 1,024 file descriptors
STALE_AFTER = 5.0  # a scrape loop starved this long would show here as a stale snapshot


def balanced_snapshot(path: Path) -> Path:
    doc = json.loads((FIXTURES / "seed-snapshot.json").read_text())
    doc["pools"]["mamba"]["available"] = 472  # 476 = 472 + 4 evictable: no surplus
    path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def client_fds(wanted: int) -> Iterator[None]:
    """This process may hold ``wanted`` descriptors for the block (soft limit raised, then put back)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the hard descriptor limit ({hard}) is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


SERVE_WITH_1024_FDS = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({SERVER_FDS}, {SERVER_FDS}))
from poolwatch.cli import main
sys.exit(main(["serve"]))
"""


@contextlib.contextmanager
def sidecar(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "POOLWATCH_WORKER": "flood", "POOLWATCH_HOST": "127.0.0.1",
           "POOLWATCH_PORT": str(port), "POOLWATCH_LOG_LEVEL": "warning",
           "POOLWATCH_SNAPSHOT_FILES": str(balanced_snapshot(tmp_path / "control.json")),
           "POOLWATCH_STALE_AFTER": str(STALE_AFTER), "POOLWATCH_STALE_FOR": "1"}  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-c", SERVE_WITH_1024_FDS]
    with running(argv, env, tmp_path / "sidecar.log", lambda: control_scraped(url)):
        yield url


def control_scraped(url: str) -> bool:
    return 'target="file:control.json"' in httpx.get(f"{url}/metrics", timeout=1).text


def wave(port: int) -> list[socket.socket]:
    """``WAVE`` connections that never send a byte (refused or reset ones are not retried)."""
    out = []
    for _ in range(WAVE):
        with contextlib.suppress(OSError):
            out.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return out


def control_is_watched(url: str) -> str:
    """``/healthz`` and ``/metrics`` answer; the control target is up and fresh; no stale alert.
    Returns the exposition (for the message of a failed check)."""
    assert httpx.get(f"{url}/healthz", timeout=3).status_code == 200
    body = httpx.get(f"{url}/metrics", timeout=3).text
    assert re.search(r'^poolwatch_target_up\{[^}]*target="file:control.json"[^}]*\} 1\.0$', body, re.M), body
    ages = [float(m) for m in re.findall(r"^poolwatch_snapshot_age_seconds\{[^}]*\} (\S+)$", body, re.M)]
    assert ages, body
    assert max(ages) < STALE_AFTER
    assert 'alertname="PoolwatchSnapshotStale"' not in body
    return body


@pytest.mark.slow
def test_two_waves_of_1100_idle_connections_leave_the_sidecar_answering_and_the_control_fresh(
    tmp_path: Path,
) -> None:
    with client_fds(2 * WAVE + 256), sidecar(tmp_path) as url:
        port = int(url.rsplit(":", 1)[1])
        control_is_watched(url)
        held: list[socket.socket] = []
        try:
            for _ in range(2):  # the second wave comes as the head timeout closes the first
                held += wave(port)
                for _ in range(8):  # ~4 s of checks under the flood
                    control_is_watched(url)
                    time.sleep(0.5)
        finally:
            for s in held:
                s.close()
        control_is_watched(url)

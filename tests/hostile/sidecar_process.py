"""A real ``poolwatch serve`` for the hostile tier: started with an environment, read over HTTP.

:func:`serve` starts the sidecar (this venv's Python, its log in a file) on a free loopback port
and yields its base URL once ``/healthz`` answers; it is stopped (and killed if need be) when the
block ends.  :func:`running` does that for any command that runs one (up when the caller says).
:func:`samples` reads ``/metrics`` into ``{(name, labels): value}``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from tests.helpers import free_port

from rigs.stack.processes import end

__all__ = ["running", "samples", "serve"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{.*\})? (\S+)$")


@contextlib.contextmanager
def serve(env: dict[str, str], log: Path) -> Iterator[str]:
    port = free_port()
    full = {**os.environ, "POOLWATCH_HOST": "127.0.0.1", "POOLWATCH_PORT": str(port), **env}
    url = f"http://127.0.0.1:{port}"
    with running([sys.executable, "-m", "poolwatch.cli", "serve"], full, log, lambda: _healthy(url)):
        yield url


def _healthy(url: str) -> bool:
    return httpx.get(f"{url}/healthz", timeout=1).status_code == 200


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str], log: Path, up: Callable[[], bool]) -> Iterator[None]:
    """``argv`` run with ``env`` alone, its output appended to ``log``, until the block ends (then
    stopped, killed if need be); the block starts once ``up()`` (an HTTP error: not yet), or after
    60 s; an early exit fails with the log's tail."""
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    try:
        for _ in range(600):  # up within 60 s on a loaded machine
            with contextlib.suppress(httpx.HTTPError):
                if up():
                    break
            if proc.poll() is not None:
                raise AssertionError(f"the sidecar exited: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield
    finally:
        end(proc, grace=15)


def samples(url: str) -> dict[tuple[str, str], float]:
    """``{(metric name, its labels as written): value}`` of the sidecar's ``/metrics``."""
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        m = _SAMPLE.match(line)
        if m is not None:
            out[(m[1], m[2] or "")] = float(m[3])
    return out

"""How bench_hostile_neighbour starts its processes: the neighbour (as uid ``nobody`` through
``setpriv`` when run as root, else as this user) and ``poolwatch serve`` on a free loopback port,
and a poll for the moment a condition first holds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from rigs.stack.processes import end


def as_neighbour() -> list[str]:
    """How the neighbour's processes start: as ``nobody`` when this is root, else as this user."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv and os.access("/usr/bin/python3", os.X_OK):
        return [
            setpriv,
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
        ]
    return [sys.executable, "-I", "-c"]


@contextlib.contextmanager
def neighbour(code: str, *args: str) -> Iterator[str]:
    """Run ``code`` as the neighbour; yields its first line of output (it runs until the block ends)."""
    proc = subprocess.Popen([*as_neighbour(), code, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sidecar(
    env: dict[str, str], log: Path, argv: list[str] | None = None
) -> Iterator[tuple[str, int, float]]:
    """``poolwatch serve``; yields (URL, pid, the monotonic time it was started)."""
    port = free_port()
    full = {**os.environ, "POOLWATCH_HOST": "127.0.0.1", "POOLWATCH_PORT": str(port), **env}
    started = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv or [sys.executable, "-m", "poolwatch.cli", "serve"], env=full, stdout=out, stderr=out
        )
    try:
        yield f"http://127.0.0.1:{port}", proc.pid, started
    finally:
        end(proc, grace=15)


def until(probe: object, timeout: float = 60.0, every: float = 0.01) -> float:
    """Poll ``probe()`` until true; the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if probe():  # type: ignore[operator]
                return time.monotonic()
        time.sleep(every)
    raise TimeoutError("never")

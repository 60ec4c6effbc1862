"""Helpers for tests: ``from tests.helpers import asgi_client, free_port, require_tool``.  The clock
tests move by hand is :class:`rigs.fakes.clock.FakeClock` (the benchmarks move it too).

Use ``asgi_client(app)`` rather than starlette's TestClient (deprecated with httpx)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from rigs.fakes.clock import FakeClock

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent
# Headless Chromium in a container (root, no GPU, no network): the status page and demo screenshots.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class SteppingClock:
    """A clock every read of which is ``step`` seconds later (a probe asked for a sample finds every
    sample due); it starts at 1e9, later than the real clock that stamped an attach sample."""

    def __init__(self, now: float = 1e9, step: float = 1.0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class FakeWait:
    """Stands in for ``Condition.wait``: the fake clock passes (at most ``step`` per call) and
    ``during`` runs with the condition released, as another thread would run during a real wait."""

    def __init__(self, clock: FakeClock, step: float, during: Callable[[], None] | None = None) -> None:
        self.clock, self.step, self.during = clock, step, during
        self.calls: list[float] = []

    def __call__(self, cond: threading.Condition, timeout: float) -> bool:
        self.calls.append(timeout)
        self.clock.advance(min(timeout, self.step))
        if self.during is not None:
            cond.release()
            try:
                self.during()
            finally:
                cond.acquire()
        return True


def require_tool(name: str) -> str:
    """The path of an external tool; skip without it, but fail in CI (POOLWATCH_REQUIRE_TOOLS=1)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (see .ci/run for how CI installs it)"
        if os.environ.get("POOLWATCH_REQUIRE_TOOLS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    """A loopback port the OS has just handed out, for a server the caller starts soon after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(port: int, *flags: str) -> list[str]:
    """``poolwatch serve`` on loopback ``port`` as this interpreter runs it, with ``flags``."""
    loopback = ("--host", "127.0.0.1", "--port", str(port))
    return [sys.executable, "-m", "poolwatch.cli", "serve", *loopback, *flags]


def await_healthy(url: str, deadline_s: float = 60.0) -> bool:
    """Poll ``url``'s ``/healthz`` until it answers (a loaded machine needs a moment); whether it did."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return True
        except OSError:
            time.sleep(0.2)
    return False


@contextlib.asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in-process, with its lifespan running."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
            yield client


SEED_ISSUE = "seed/sglang-issue-pd-mamba-leak-check.txt"
# the labels of the alert the seed incident raises, on the tests' usual rank (prefill-0, TP rank 1):
# a double free on its Mamba pool
SEED_DOUBLE_FREE_LABELS = {
    "alertname": "PoolwatchDoubleFree",
    "severity": "critical",
    "worker": "prefill-0",
    "role": "prefill",
    "dp_rank": "0",
    "tp_rank": "1",
    "pp_rank": "0",
    "pool": "mamba",
}


def seed_issue() -> Path:
    """The seed incident's text (the project's ``shared/`` folder, beside the checkout or at
    /work/shared); skipped when absent, failed in CI (POOLWATCH_REQUIRE_TOOLS=1)."""
    for shared in (REPO.parent / "shared", Path("/work/shared")):
        if (shared / SEED_ISSUE).is_file():
            return shared / SEED_ISSUE
    message = f"shared/{SEED_ISSUE} is not beside the checkout"
    if os.environ.get("POOLWATCH_REQUIRE_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def source_tree(into: Path) -> Path:
    """A copy of this checkout's source (the files git tracks, and the untracked ones it does not
    ignore, as they are in the working tree) under ``into``: what ``python -m build`` builds from
    when two test processes may build at once (setuptools writes ``build/`` and ``*.egg-info`` in
    the tree it builds)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into

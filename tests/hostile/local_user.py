"""A second local user for the hostile tier: real processes run as uid ``nobody``.

:func:`require_nobody` skips a test unless this process is root (it switches users with
``setpriv --reuid=nobody --regid=nogroup --clear-groups``), and fails it instead in CI
(``POOLWATCH_REQUIRE_TOOLS=1``).  :func:`run_as_nobody` runs a short stdlib-only Python program
as that user (``/usr/bin/python3``, which ``nobody`` may run) and :func:`spawn_as_nobody` starts a
long-running one (a listener); every one is bounded by a timeout or killed when the test ends.
:func:`arena` is a ``/tmp``-like directory (mode 1777) where ``nobody`` plants its files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["NOBODY", "arena", "require_nobody", "run_as_nobody", "spawn_as_nobody"]

NOBODY = 65534
_PYTHON = "/usr/bin/python3"


def require_nobody() -> list[str]:
    """The command prefix that runs as ``nobody``; skipped unless root (failed in CI)."""
    setpriv = shutil.which("setpriv")
    problem = ""
    if os.geteuid() != 0:
        problem = "the hostile-user tier switches to uid nobody: it must run as root"
    elif setpriv is None or not os.access(_PYTHON, os.X_OK):
        problem = f"setpriv (util-linux) and {_PYTHON} are needed to run as nobody"
    if problem:
        if os.environ.get("POOLWATCH_REQUIRE_TOOLS") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    assert setpriv is not None
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", _PYTHON, "-I", "-c"]


def run_as_nobody(code: str, *args: str, timeout: float = 10.0) -> str:
    """Run ``code`` as ``nobody`` (stdlib only); its stdout; a failure fails the test."""
    done = subprocess.run(
        [*require_nobody(), code, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"as nobody: rc={done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@contextlib.contextmanager
def spawn_as_nobody(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Start ``code`` as ``nobody``; it is killed (and waited for) when the block ends."""
    proc = subprocess.Popen(
        [*require_nobody(), code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.communicate(timeout=10)  # reaped, its pipes closed


@contextlib.contextmanager
def arena(mode: int = 0o1777, prefix: str = "poolwatch-hostile-") -> Iterator[Path]:
    """A fresh world-writable directory that ``nobody`` can plant in, removed at the end: sticky by
    default (like ``/tmp``)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        base.chmod(mode)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""The stack's processes on loopback: ports handed out once, subprocesses stopped by pid, polling
with a deadline (never a fixed wait), and log files watched for a line.

Everything binds 127.0.0.1; each process writes its output to a log file in the run's directory,
whose tail is shown when a wait runs out.
"""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

__all__ = [
    "LogWatcher",
    "Process",
    "end",
    "ephemeral_low",
    "free_port",
    "free_ports",
    "http_ok",
    "poll",
    "tail",
]

T = TypeVar("T")


_HANDED: set[int] = set()  # every port this process handed out: never twice (issue 34, below)


def free_port() -> int:
    """A port nobody listens on now, for a server the caller starts soon after.  It is drawn below
    the kernel's ephemeral range, so no outgoing connection of another process (a benchmark's
    thousand clients) can take it in between, as one the OS picks with ``bind(0)`` could; and it
    is never one this process handed out before (for a server not started yet, it is free too):
    two sidecars given one port made one answer for both pods, and a page named prefill-1's
    worker with decode-0's pod (issue 34's cold CI run)."""
    return free_ports(1)


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports, each as :func:`free_port` would hand it out."""
    low = ephemeral_low()
    for _ in range(400):
        base = random.randrange(max(1024, low - 12000), low - n)
        block = range(base, base + n)
        if _HANDED.intersection(block):
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in block:
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED.update(block)
        return base
    raise AssertionError(f"no {n} consecutive free ports below the ephemeral range")


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; IANA's 49152 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def poll(
    probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.2, logs: Sequence[Path] = ()
) -> T:
    """Call ``probe`` until it returns something other than None; fail naming ``what`` (and the
    tails of ``logs``) when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            tails = "\n".join(f"--- {p.name}:\n{tail(p)}" for p in logs)
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        pause.wait(every)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


def http_ok(url: str) -> bool | None:
    """True once ``url`` answers 2xx (None while it does not)."""
    try:
        return True if httpx.get(url, timeout=2.0).is_success else None
    except httpx.HTTPError:
        return None


@dataclass
class Process:
    """One subprocess with its output in ``log``; :meth:`stop` ends it by pid, SIGKILL as a last resort."""

    name: str
    argv: list[str]
    log: Path
    stop_signal: int = signal.SIGTERM
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        if self.popen is not None:
            end(self.popen, self.stop_signal)


def end(popen: subprocess.Popen[bytes], stop_signal: int = signal.SIGTERM, grace: float = 15.0) -> None:
    """End ``popen`` if it still runs: ``stop_signal``, then SIGKILL after ``grace`` seconds."""
    if popen.poll() is not None:
        return
    popen.send_signal(stop_signal)
    try:
        popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=grace)


class LogWatcher:
    """Notes the wall time a line containing ``marker`` first appears in each of ``logs`` (read
    every 50 ms on a thread), e.g. when an emulated worker logs its crash."""

    def __init__(self, logs: dict[str, Path], marker: str) -> None:
        self.logs = logs
        self.marker = marker
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="log-watcher")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for name, path in self.logs.items():
                if name not in self.seen and self._contains(path):
                    self.seen[name] = time.time()

    def _contains(self, path: Path) -> bool:
        try:
            return self.marker in path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

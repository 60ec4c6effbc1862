"""Start serving a probe and announce it: the loopback HTTP endpoint plus the discovery file.

The engine room says who the worker is and its local index (``identify``); the rest is the same for
every engine.  The endpoint's mutating routes ask for the node's secret
(:func:`~poolwatch.discovery.files.ensure_secret`, a mode-0600 file beside the discovery files); a
directory where it cannot be written, or that someone else could have written
(:mod:`poolwatch.discovery.safety`), leaves them refused and the rank unannounced, noted in the
probe's health (the ``DISABLE`` file still works).  A port base whose ``base + local rank`` is not a
port, or is taken, still serves, on any free port, and notes why.

An engine that calls no hook while idle (vLLM's EngineCore blocks on its input queue) passes
``keepalive``: one more thread calls it every :data:`KEEPALIVE_S` until :meth:`Publisher.stop`.

An announced rank's file is removed when its process ends however it ends, SIGKILL included
(:mod:`poolwatch.probe.endpoint.keeper`).  Attaching logs one line through ``poolwatch.probe``
(the engine's own format): the engine, release, rank, endpoint and directory, or why the rank is
not announced.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from poolwatch.discovery.entry import DiscoveryEntry, remove_discovery, write_discovery
from poolwatch.discovery.files import ensure_secret
from poolwatch.model.rank import WorkerId
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.engine import Engine, Release
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.endpoint.keeper import Keeper
from poolwatch.probe.endpoint.routes import Servable
from poolwatch.probe.endpoint.server import ProbeServer

__all__ = ["KEEPALIVE_S", "Announced", "Identify", "Publisher"]

KEEPALIVE_S = 1.0
log = logging.getLogger("poolwatch.probe")
Identify = Callable[[Reading], tuple[WorkerId, int]]  # -> (the worker, its local index on the node)


class Announced(Servable, Protocol):
    """What a probe offers the publisher (beyond what the endpoint serves)."""

    config: ProbeConfig
    guard: Guard
    boot_id: str
    started_at: float
    engine: Engine
    release: Release


class Publisher:
    """The endpoint and discovery file of one probe; ``stop()`` (also run at exit) removes both."""

    def __init__(
        self, probe: Announced, identify: Identify, *, keepalive: Callable[[], object] | None = None
    ) -> None:
        self.probe, self.identify, self.keepalive = probe, identify, keepalive
        self.server: ProbeServer | None = None
        self.path: Path | None = None
        self.keeper: Keeper | None = None
        self.secret: str | None = None  # the node's, once adopted: it also signs a final snapshot
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        probe = self.probe
        worker, index = self.identify(Reading())
        self.server = self._bind(probe.config.port_base, index)
        url = self.server.start()
        entry = DiscoveryEntry(
            url=url,
            pid=os.getpid(),
            worker=worker.worker,
            dp_rank=worker.dp_rank,
            tp_rank=worker.tp_rank,
            pp_rank=worker.pp_rank,
            boot_id=probe.boot_id,
            started_at=probe.started_at,
        )
        try:
            self.path = write_discovery(probe.config.directory, entry)
        except OSError as exc:
            probe.guard.note("discovery", f"{type(exc).__name__}: {exc}")
        self._keep(entry.boot_id)
        self._say_attached(entry)
        if self.keepalive is not None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._keep_alive, name="poolwatch-idle", daemon=True)
            self._thread.start()
        atexit.register(self.stop)
        return url

    def _keep(self, boot_id: str) -> None:
        if self.path is None:
            return
        try:
            self.keeper = Keeper(self.path, boot_id)
        except OSError as exc:  # no process to spare: the file may outlive the rank, nothing else
            self.probe.guard.note("keeper", f"{type(exc).__name__}: {exc}")

    def _say_attached(self, entry: DiscoveryEntry) -> None:
        rank = f"{entry.worker} dp{entry.dp_rank}-tp{entry.tp_rank}-pp{entry.pp_rank}"
        release = self.probe.release
        version = f"{release.version or '(not installed)'} read as {release.family}"
        version += "" if release.verified else " (unverified: a release poolwatch never read)"
        what = f"poolwatch probe attached: {self.probe.engine.name} {version}, {rank} serving {entry.url}"
        guard = "on" if self.probe.config.guard else "off"
        if self.path is not None:
            log.info("%s, announced in %s (guard %s)", what, self.path.parent, guard)
        else:
            log.warning(
                "%s, NOT announced in %s: %s; the sidecar will not find it (`poolwatch doctor` says why)",
                what,
                self.probe.config.directory,
                self.probe.guard.last_error or "unknown",
            )

    def _keep_alive(self) -> None:
        while not self._stopping.wait(KEEPALIVE_S):
            try:
                if self.keepalive is not None:
                    self.keepalive()
            except Exception as exc:  # never let the thread die silently
                self.probe.guard.note("keepalive", f"{type(exc).__name__}: {exc}")

    def _secret(self) -> str | None:
        try:
            self.secret = ensure_secret(self.probe.config.directory)
            return self.secret
        except OSError as exc:  # an unsafe directory too (UnsafePathError): nothing adopted
            self.probe.guard.note("secret", f"{type(exc).__name__}: {exc}")
            return None

    def _bind(self, base: int | None, index: int) -> ProbeServer:
        secret = self._secret()
        if base is None:
            return ProbeServer(self.probe, secret=secret)
        try:
            if not 0 < base + index <= 65535:
                raise OSError(f"not a TCP port (base {base} + local rank {index})")
            return ProbeServer(self.probe, port=base + index, secret=secret)
        except (OSError, OverflowError) as exc:  # taken or out of range: still serve, on any free port
            self.probe.guard.note("bind", f"port {base + index}: {exc}")
            return ProbeServer(self.probe, secret=secret)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.path is not None:
            remove_discovery(self.path)
            self.path = None
        if self.keeper is not None:
            self.keeper.close()
            self.keeper = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        atexit.unregister(self.stop)

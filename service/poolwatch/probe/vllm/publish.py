"""Start serving a vLLM probe and announce it: the loopback endpoint plus the discovery file.

The same endpoint and discovery entry as SGLang's probe (the sidecar cannot tell the engines apart
except by the snapshot's ``worker.engine``); a port base whose ``base + local index`` is taken
still serves, on any free port, and notes why.  One more thread re-stamps the idle snapshot once a
second (:meth:`~poolwatch.probe.vllm.probe.Probe.refresh_idle`): an idle EngineCore calls no hook.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

from poolwatch.discovery.entry import DiscoveryEntry, remove_discovery, write_discovery
from poolwatch.discovery.files import ensure_secret
from poolwatch.probe.core.access import Reading
from poolwatch.probe.endpoint.server import ProbeServer
from poolwatch.probe.vllm.identity import local_index, worker_identity
from poolwatch.probe.vllm.probe import Probe

__all__ = ["KEEPALIVE_S", "Publisher"]

KEEPALIVE_S = 1.0


class Publisher:
    """The endpoint and discovery file of one probe; ``stop()`` (also run at exit) removes both."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.server: ProbeServer | None = None
        self.path: Path | None = None
        self._keepalive = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        reading = Reading()
        probe = self.probe
        worker = worker_identity(probe.scheduler, reading, probe.version, probe.environ)
        self.server = self._bind(probe.config.port_base, local_index(probe.scheduler, reading))
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
        self._keepalive.clear()
        self._thread = threading.Thread(target=self._idle_keepalive, name="poolwatch-idle", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return url

    def _idle_keepalive(self) -> None:
        """Re-stamp the idle snapshot once a second (EngineCore calls no hook while idle)."""
        while not self._keepalive.wait(KEEPALIVE_S):
            try:
                self.probe.refresh_idle()
            except Exception as exc:  # never let the thread die silently
                self.probe.guard.note("keepalive", f"{type(exc).__name__}: {exc}")

    def _secret(self) -> str | None:
        try:
            return ensure_secret(self.probe.config.directory)
        except OSError as exc:
            self.probe.guard.note("secret", f"{type(exc).__name__}: {exc}")
            return None

    def _bind(self, base: int | None, index: int) -> ProbeServer:
        secret = self._secret()
        if base is None:
            return ProbeServer(self.probe, secret=secret)
        try:
            if not 0 < base + index <= 65535:
                raise OSError(f"not a TCP port (base {base} + local index {index})")
            return ProbeServer(self.probe, port=base + index, secret=secret)
        except (OSError, OverflowError) as exc:
            self.probe.guard.note("bind", f"port {base + index}: {exc}")
            return ProbeServer(self.probe, secret=secret)

    def stop(self) -> None:
        self._keepalive.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.path is not None:
            remove_discovery(self.path)
            self.path = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        atexit.unregister(self.stop)

"""Start serving a probe and announce it: the HTTP endpoint plus the discovery file.

The endpoint's mutating routes ask for the node's secret (:func:`~poolwatch.discovery.files.ensure_secret`,
a mode-0600 file beside the discovery files); a directory where it cannot be written, or that
someone else could have written (:mod:`poolwatch.discovery.safety`), leaves them refused and the
rank unannounced, noted in the probe's health (the ``DISABLE`` file still works).  A port base
whose ``base + local rank`` is not a port, or is taken, still serves, on any free port, and notes
why.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from poolwatch.discovery.entry import DiscoveryEntry, remove_discovery, write_discovery
from poolwatch.discovery.files import ensure_secret
from poolwatch.probe.core.access import Reading
from poolwatch.probe.endpoint.server import ProbeServer
from poolwatch.probe.sglang.identity import local_index, worker_identity
from poolwatch.probe.sglang.requests import role_of
from poolwatch.probe.sglang.scheduler_probe import Probe

__all__ = ["Publisher"]


class Publisher:
    """The endpoint and discovery file of one probe; ``stop()`` (also run at exit) removes both."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.server: ProbeServer | None = None
        self.path: Path | None = None
        self.secret: str | None = None  # the node's, once adopted: it also signs the final snapshot

    def start(self) -> str:
        reading = Reading()
        sched, config = self.probe.scheduler, self.probe.config
        worker = worker_identity(
            sched, reading, role_of(sched, reading), self.probe.version, self.probe.environ
        )
        self.server = self._bind(config.port_base, local_index(sched, reading))
        url = self.server.start()
        entry = DiscoveryEntry(
            url=url,
            pid=os.getpid(),
            worker=worker.worker,
            dp_rank=worker.dp_rank,
            tp_rank=worker.tp_rank,
            pp_rank=worker.pp_rank,
            boot_id=self.probe.boot_id,
            started_at=self.probe.started_at,
        )
        try:
            self.path = write_discovery(config.directory, entry)
        except OSError as exc:
            self.probe.guard.note("discovery", f"{type(exc).__name__}: {exc}")
        atexit.register(self.stop)
        return url

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
        if self.path is not None:
            remove_discovery(self.path)
            self.path = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        atexit.unregister(self.stop)

"""Run the sidecar: scrape the configured targets and serve /metrics, the API and the status page.

A scraped sidecar binds every interface, so its server must survive a flood (uvicorn, tuned here):

* every connection must send a whole request head within :data:`HEAD_TIMEOUT_S` of connecting
  and may idle at most :data:`KEEP_ALIVE_S` between requests, so idle or trickling connections
  cannot pile up;
* past :data:`MAX_CONNECTIONS` open connections the oldest idle one is closed to make room (a
  flood costs the flooder, not Prometheus' next scrape); the file-descriptor limit is raised to
  the hard limit so the cap is reached before it;
* request heads are at most 16 KiB; the access log is off (``--log-level debug`` does not turn
  it on; a reverse proxy or Prometheus' own scrape stats tell who calls);
* SIGTERM stops the process within a few seconds: open connections get
  :data:`GRACEFUL_S`, background tasks 2 s each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable
from typing import ClassVar

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from poolwatch.commands.logs import UVICORN_LOG_CONFIG, configure
from poolwatch.commands.quiet_server import QuietServer
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings, add_flags, from_args
from poolwatch.sidecar.app import create_app

__all__ = ["GuardedH11", "add_arguments", "run", "server_config"]

HEAD_TIMEOUT_S = 5.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 512
GRACEFUL_S = 3
MAX_HEAD_BYTES = 16 * 1024
GC_YOUNG_OBJECTS = 50_000  # new container objects between two young collections (the default is 700)


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a request-head deadline and a cap on open connections
    (a subclass may set other limits: ``server_config(..., http=...)``)."""

    head_timeout_s: ClassVar[float] = HEAD_TIMEOUT_S
    max_connections: ClassVar[int] = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened_at = time.monotonic()
        self.head_deadline = self.loop.call_later(self.head_timeout_s, self._no_head)
        if len(self.connections) > self.max_connections:
            _close_oldest_idle(self.connections, self)

    def handle_events(self) -> None:
        super().handle_events()
        if self._cycle() is not None:  # a whole head arrived: the keep-alive timer takes over
            self.head_deadline.cancel()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_deadline.cancel()
        super().connection_lost(exc)

    def idle(self) -> bool:
        cycle = self._cycle()
        return cycle is None or bool(getattr(cycle, "response_complete", True))

    def _cycle(self) -> object | None:
        return getattr(self, "cycle", None)  # None until the first request head

    def _no_head(self) -> None:
        if self._cycle() is None and not self.transport.is_closing():
            self.transport.close()


def _close_oldest_idle(connections: Iterable[object], keep: H11Protocol) -> None:
    idle = [
        c
        for c in connections
        if c is not keep and isinstance(c, GuardedH11) and c.idle() and not c.transport.is_closing()
    ]
    if idle:
        min(idle, key=lambda c: c.opened_at).transport.close()


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def server_config(app: FastAPI, settings: Settings, *, http: type[GuardedH11] = GuardedH11) -> uvicorn.Config:
    """uvicorn's settings for the sidecar (see the module docstring)."""
    return uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        log_config=UVICORN_LOG_CONFIG,  # uvicorn's lines take poolwatch's one format (commands/logs.py)
        http=http,
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_S,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        backlog=256,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser)


def _build(args: argparse.Namespace) -> tuple[Settings, FastAPI]:
    """Settings and app; a bad setting (in the flags, the environment, or a file they name)
    raises ``ConfigError``."""
    settings = from_args(args, os.environ)
    configure(settings.server.log_level, settings.server.log_format)
    return settings, create_app(settings)


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections for the long-running sidecar (never for the probe's
    host process, which this command is not).  What exists once the app is built (modules, routes,
    settings) lives as long as the process, so it is frozen out of every later collection; and
    the first generation is collected after 50,000 new objects instead of 700, so the dozens of
    short-lived containers of each decoded probe answer no longer trigger collections.  Measured
    in-process on a 1,000-rank busy stream: collections cost 15 us an answer with the defaults
    and 2 us with these (``docs/benchmarks.md``).  Cyclic garbage waits at most that many
    allocations longer: a few MB."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_OBJECTS, 20, 20)


def _serve_quietly(config: uvicorn.Config) -> None:
    QuietServer(config).run()


def run(args: argparse.Namespace, *, serve: Callable[[uvicorn.Config], None] = _serve_quietly) -> int:
    """Build the app, tune the process (file descriptors, collector), then ``serve`` until told
    to stop."""
    try:
        settings, app = _build(args)
    except ConfigError as exc:
        print(f"poolwatch: configuration error: {exc}", file=sys.stderr)
        return 2
    _raise_fd_limit()
    _tune_gc()
    serve(server_config(app, settings))
    return 0

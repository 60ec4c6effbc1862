"""Watch an emulated PD cluster hit the seed's Mamba double free: the sidecar pages before SGLang crashes.

Everything runs in this process on 127.0.0.1: the emulated SGLang workers (with the real in-process
probe attached to every rank, SGLang-shaped ``/metrics`` and log files), and the sidecar (scrape,
detect, ``/metrics``, the API and the status page).  The console tells the story as it happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import socket
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import uvicorn

from poolwatch.cli import TORCH_CPU_INSTALL
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch_emulator.demo_story import Story

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--port", type=int, default=9464, help="the sidecar's port on 127.0.0.1")
    a("--healthy", type=float, default=30.0, help="simulated seconds of healthy traffic before the fault")
    a("--fault", default="pd-chunked-mamba-double-free", help="fault to inject (see `poolwatch emulate`)")
    a("--version", default="0.5.4.post1", help="SGLang release whose bookkeeping is emulated")
    a("--prefill", type=int, default=1, help="PD prefill workers")
    a("--decode", type=int, default=1, help="PD decode workers")
    a("--tp", type=int, default=2, help="tensor-parallel ranks per worker (one probe each)")
    a("--time-scale", type=float, default=2.0, help="simulated seconds per wall second")
    a("--duration", type=float, default=0.0, help="wall seconds to run (0 = until Ctrl-C)")
    a("--seed", type=int, default=0, help="seed of the emulated traffic (the same seed, the same run)")
    a(
        "--guard",
        action="store_true",
        help="the probe's guard mode (POOLWATCH_PROBE_GUARD=1): it repairs the fault, the worker lives",
    )
    a(
        "--work-dir",
        type=Path,
        default=None,
        help="where logs and probe discovery files go (default: a temp dir)",
    )


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        import torch  # noqa: F401  (the emulator's free lists are torch tensors)
    except ModuleNotFoundError:
        print(f"poolwatch demo: needs torch; its CPU build: {TORCH_CPU_INSTALL}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s %(message)s")
    try:
        listener = listen(args.port)
    except OSError as exc:
        print(taken_port_line(args.port, exc), file=sys.stderr)
        return 2
    with listener, tempfile.TemporaryDirectory(prefix="poolwatch-demo-") as tmp:
        work = args.work_dir or Path(tmp)
        try:
            story = Story.build(args, work, out)
        except (ValueError, ConfigError) as exc:
            print(f"poolwatch demo: {exc}", file=sys.stderr)
            return 2
        try:
            try:
                code = asyncio.run(_serve(story, args, listener))
            except KeyboardInterrupt:  # Ctrl-C: uvicorn stops the sidecar, then hands the signal on
                code = 0
            if code == 0:
                story.finish()
            return code
        finally:
            story.close()


def listen(port: int) -> socket.socket:
    """The sidecar's socket on 127.0.0.1:``port``, bound before anything starts, so a taken port
    is one line (:func:`taken_port_line`) instead of a server's traceback after the cluster came up."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no owner
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def taken_port_line(port: int, exc: OSError) -> str:
    """The one line a port that cannot be bound gets: which port, why, how to choose another."""
    if exc.errno == errno.EADDRINUSE:
        why = "is already in use by another process"
    elif exc.errno == errno.EACCES:
        why = "may not be bound by this user"
    else:
        why = f"cannot be bound ({exc.strerror or exc})"
    return (
        f"poolwatch demo: port {port} on 127.0.0.1 {why}; "
        f"choose another with --port (e.g. scripts/demo --port {port + 1 if port < 65535 else 9465})"
    )


def sidecar_settings(port: int, probe_dir: Path) -> Settings:
    return Settings.from_values(
        {
            "host": "127.0.0.1",
            "port": str(port),
            "probe_dir": str(probe_dir),
            "scrape_interval": "0.5",
            "evaluate_interval": "0.5",
            "log_level": "warning",
            "stale_after": "60",  # keep a crashed worker's last figures on the page for a minute
            "worker": "demo",
        }
    )


async def _serve(story: Story, args: argparse.Namespace, listener: socket.socket) -> int:
    app = create_app(sidecar_settings(args.port, story.probe_dir))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        if serving.done():
            with contextlib.suppress(BaseException):  # uvicorn ends a failed start with SystemExit
                serving.result()
            print(f"poolwatch demo: the sidecar did not start on 127.0.0.1:{args.port}", file=sys.stderr)
            return 2
        await asyncio.sleep(0.05)
    story.begin(f"http://127.0.0.1:{args.port}", app.state.alerting)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.duration if args.duration > 0 else None
    while not serving.done() and (deadline is None or loop.time() < deadline):
        story.tick()
        await asyncio.sleep(0.05)
    server.should_exit = True
    await serving
    return 0

"""Watch an emulated PD cluster hit the seed's Mamba double free: the sidecar pages before SGLang crashes.

Everything runs in this process on 127.0.0.1: the emulated SGLang workers (with the real in-process
probe attached to every rank, SGLang-shaped ``/metrics`` and log files), and the sidecar (scrape,
detect, ``/metrics``, the API and the status page).  The console tells the story as it happens.

What a run leaves is kept in its work directory (``--work-dir``; by default a new one per run under
:func:`demo_home`): the workers' logs, the probes' directory, and the sidecar's alert state with its
incidents file beside it, which ``poolwatch incident list|export --file`` reads after the demo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import uvicorn

from poolwatch.cli import TORCH_CPU_INSTALL
from poolwatch.commands.logs import UVICORN_LOG_CONFIG, configure
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.incidents.file import incidents_path
from poolwatch_emulator.demo_story import Story

__all__ = ["add_arguments", "demo_home", "run", "state_file", "work_dir"]


def demo_home(environ: Mapping[str, str]) -> Path:
    """Where demo runs are kept: ``$XDG_STATE_HOME/poolwatch/demo``, else
    ``~/.local/state/poolwatch/demo``."""
    state = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME") or Path.home(), ".local", "state"))
    return Path(state, "poolwatch", "demo")


def work_dir(given: Path | None, environ: Mapping[str, str], now: float) -> Path:
    """The run's work directory: ``given``, else a new one under :func:`demo_home` named by the
    UTC time; made private to this user (0700)."""
    path = given or demo_home(environ) / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def state_file(work: Path) -> Path:
    """The sidecar's alert state file in ``work``; its incidents are kept beside it."""
    folder = work / "sidecar"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / "alerts.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--port", type=int, default=9464, help="the sidecar's port on 127.0.0.1")
    a("--healthy", type=float, default=30.0, help="simulated seconds of healthy traffic before the fault")
    a("--fault", default="pd-chunked-mamba-double-free", help="fault to inject (see `poolwatch emulate`)")
    a(
        "--version",
        default=None,
        help="SGLang release whose bookkeeping is emulated (default: 0.5.4.post1 for the first fault "
        "classes, else the fault's scenario's)",
    )
    a("--prefill", type=int, default=None, help="PD prefill workers (default: 1, or the fault's scenario's)")
    a("--decode", type=int, default=None, help="PD decode workers (default: 1, or the fault's scenario's)")
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
        help="where the run's logs, probe directory, alert state and incidents are kept after it "
        "(default: a new directory per run under $XDG_STATE_HOME/poolwatch/demo, else "
        "~/.local/state/poolwatch/demo)",
    )


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        import torch  # noqa: F401  (the emulator's free lists are torch tensors)
    except ModuleNotFoundError:
        print(f"poolwatch demo: needs torch; its CPU build: {TORCH_CPU_INSTALL}", file=sys.stderr)
        return 2
    try:
        listener = listen(args.port)
    except OSError as exc:
        print(taken_port_line(args.port, exc), file=sys.stderr)
        return 2
    configure("error", "text")  # the story is the console's; only errors are logged, in the one format
    with listener:
        try:
            work = work_dir(args.work_dir, os.environ, time.time())
            story = Story.build(args, work, out)
        except (OSError, ValueError, ConfigError) as exc:
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


def sidecar_settings(port: int, probe_dir: Path, state: Path) -> Settings:
    return Settings.from_values(
        {
            "host": "127.0.0.1",
            "port": str(port),
            "probe_dir": str(probe_dir),
            "state_file": str(state),  # the incidents are kept beside it, after the demo too
            "scrape_interval": "0.5",
            "evaluate_interval": "0.5",
            "log_level": "warning",
            "stale_after": "60",  # keep a crashed worker's last figures on the page for a minute
            "worker": "demo",
        }
    )


async def _serve(story: Story, args: argparse.Namespace, listener: socket.socket) -> int:
    settings = sidecar_settings(args.port, story.probe_dir, state_file(story.work))
    story.incidents_file = incidents_path(settings.alerting.state_file)
    app = create_app(settings)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", log_config=UVICORN_LOG_CONFIG
    )
    server = uvicorn.Server(config)
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

"""Watch an emulated PD cluster hit the seed's Mamba double free: the sidecar pages before SGLang crashes.

Everything runs in this process on 127.0.0.1: the emulated SGLang workers (with the real in-process
probe attached to every rank, SGLang-shaped ``/metrics`` and log files), and the sidecar (scrape,
detect, ``/metrics``, the API and the status page).  The console tells the story as it happens.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
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
    a("--port", type=int, default=9464, help="the sidecar's port on 127.0.0.1 (default 9464)")
    a("--healthy", type=float, default=30.0, help="simulated seconds of healthy traffic before the fault")
    a("--fault", default="pd-chunked-mamba-double-free", help="fault to inject (see `poolwatch emulate`)")
    a("--version", default="0.5.4.post1", help="SGLang release whose bookkeeping is emulated")
    a("--prefill", type=int, default=1)
    a("--decode", type=int, default=1)
    a("--tp", type=int, default=2)
    a("--time-scale", type=float, default=2.0, help="simulated seconds per wall second")
    a("--duration", type=float, default=0.0, help="wall seconds to run (0 = until Ctrl-C)")
    a("--seed", type=int, default=0)
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
    with tempfile.TemporaryDirectory(prefix="poolwatch-demo-") as tmp:
        work = args.work_dir or Path(tmp)
        try:
            story = Story.build(args, work, out)
        except (ValueError, ConfigError) as exc:
            print(f"poolwatch demo: {exc}", file=sys.stderr)
            return 2
        try:
            try:
                code = asyncio.run(_serve(story, args))
            except KeyboardInterrupt:  # Ctrl-C: uvicorn stops the sidecar, then hands the signal on
                code = 0
            if code == 0:
                story.finish()
            return code
        finally:
            story.close()


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


async def _serve(story: Story, args: argparse.Namespace) -> int:
    app = create_app(sidecar_settings(args.port, story.probe_dir))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            print(f"poolwatch demo: could not serve on 127.0.0.1:{args.port} (in use?)", file=sys.stderr)
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

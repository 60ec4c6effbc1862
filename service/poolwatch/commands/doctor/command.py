"""``poolwatch doctor``: say whether the probe is installed, activated, attached, discovered and
scraped, and what to fix.

Run it on the engine's side (its Python, its environment: is poolwatch installed there, does the
probe read this release, has the engine consented, did its ranks announce themselves and do they
answer) or on the sidecar's (its environment: which directory it reads, whether it may trust it,
which ranks it finds, whether the running sidecar follows them).  ``--side auto`` picks the engine's
side when an engine is importable here, else the sidecar's.  ``--sidecar URL`` and ``--prometheus
URL`` carry the check on to the sidecar's API and to Prometheus.  Each step prints ok, warn, FAIL or
skip, what it saw, the fault's name and the fix.  Exit 0: no fault; 1: a fault; 2: a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

import httpx

from poolwatch.commands.doctor.engine_side import engine_checks, installed_engine
from poolwatch.commands.doctor.report import Check, exit_code, render, render_json
from poolwatch.commands.doctor.sidecar_side import sidecar_checks
from poolwatch.engines import engine_entry, probed_engines

__all__ = ["add_arguments", "diagnose", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--side",
        choices=("auto", "engine", "sidecar"),
        default="auto",
        help="whose side to check from (auto: the engine's when an engine is importable here, else "
        "the sidecar's)",
    )
    parser.add_argument(
        "--engine",
        choices=probed_engines(),
        help="the engine (engine side; default: the one importable here)",
    )
    parser.add_argument(
        "--sidecar",
        default="",
        metavar="URL",
        help="the sidecar to ask which ranks it follows (engine side: not asked unless given; sidecar side: "
        "this sidecar's own port on 127.0.0.1 unless given)",
    )
    parser.add_argument(
        "--prometheus", default="", metavar="URL", help="a Prometheus to ask for the ranks' series"
    )
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the report")


def diagnose(
    args: argparse.Namespace, environ: Mapping[str, str], client: httpx.Client
) -> tuple[str, list[Check]]:
    """The side checked (its title) and its checks."""
    engine = args.engine or installed_engine(probed_engines())
    side = args.side if args.side != "auto" else ("engine" if engine else "sidecar")
    if side == "engine":
        engine = engine or probed_engines()[0]
        title = (
            f"poolwatch doctor, {engine_entry(engine).title}'s side ({sys.executable}, uid {os.geteuid()})"
        )
        checks = engine_checks(engine, environ, client, sidecar=args.sidecar, prometheus=args.prometheus)
        return title, checks
    title = f"poolwatch doctor, the sidecar's side (uid {os.geteuid()})"
    return title, sidecar_checks(environ, client, sidecar=args.sidecar, prometheus=args.prometheus)


def run(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> int:
    with httpx.Client(trust_env=False) as client:
        title, checks = diagnose(args, os.environ if environ is None else environ, client)
    print(render_json(title, checks) if args.json else render(title, checks))
    return exit_code(checks)

"""Run the sidecar: scrape the configured targets and serve /metrics, the API and the status page."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from poolwatch.app import create_app
from poolwatch.errors import ConfigError
from poolwatch.settings import Settings, add_flags, from_args

__all__ = ["add_arguments", "run", "settings_or_exit"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser)


def settings_or_exit(args: argparse.Namespace) -> Settings | None:
    """The settings, or None after printing the one-line reason (the caller exits 2)."""
    try:
        return from_args(args, os.environ)
    except ConfigError as exc:
        print(f"poolwatch: configuration error: {exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args)
    if settings is None:
        return 2
    level = settings.server.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        app = create_app(settings)
    except ConfigError as exc:
        print(f"poolwatch: configuration error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app, host=settings.server.host, port=settings.server.port, log_level=settings.server.log_level
    )
    return 0

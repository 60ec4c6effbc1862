"""Run the sidecar: scrape the configured targets and serve /metrics, the API and the status page."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn
from fastapi import FastAPI

from poolwatch.errors import ConfigError
from poolwatch.settings import Settings, add_flags, from_args
from poolwatch.sidecar.app import create_app

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser)


def _build(args: argparse.Namespace) -> tuple[Settings, FastAPI]:
    """Settings and app; a bad setting (in the flags, the environment, or a file they name)
    raises ``ConfigError``."""
    settings = from_args(args, os.environ)
    level = settings.server.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return settings, create_app(settings)


def run(args: argparse.Namespace) -> int:
    try:
        settings, app = _build(args)
    except ConfigError as exc:
        print(f"poolwatch: configuration error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app, host=settings.server.host, port=settings.server.port, log_level=settings.server.log_level
    )
    return 0

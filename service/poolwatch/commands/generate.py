"""Regenerate the committed artifacts (rules, dashboards, README table); --check fails on drift."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from poolwatch.artifacts.registry import drift, write_all

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is stale")


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not (root / "pyproject.toml").is_file():
        print(f"poolwatch generate: {root} is not the repository root", file=sys.stderr)
        return 2
    if args.check:
        stale = drift(root)
        for path in stale:
            print(f"stale: {path} (run `poolwatch generate`)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all(root):
        print(f"wrote {path}")
    return 0

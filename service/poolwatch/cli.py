"""``poolwatch`` command line: one sub-command per module in :mod:`poolwatch.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from poolwatch import __version__

__all__ = ["COMMANDS", "main"]

# command name -> module (each has add_arguments(parser), run(args) -> int and a docstring)
COMMANDS: dict[str, str] = {
    "serve": "poolwatch.commands.serve",
    "demo": "poolwatch.commands.demo",
    "generate": "poolwatch.commands.generate",
    "check": "poolwatch.commands.check",
    "replay": "poolwatch.commands.replay",
    "emulate": "poolwatch.emulator.cli",
}


def _load(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:  # an optional part (e.g. torch for the emulator) is missing
        if exc.name and module.startswith(exc.name):
            raise
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolwatch", description="Memory-pool conservation monitoring for SGLang."
    )
    parser.add_argument("--version", action="version", version=f"poolwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = _load(module_name)
        if module is None:
            continue
        doc = (module.__doc__ or name).strip().splitlines()[0]
        doc = doc.split(": ", 1)[1] if doc.startswith("``") and ": " in doc else doc
        cmd = sub.add_parser(name, help=doc, description=doc)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

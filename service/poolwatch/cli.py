"""``poolwatch`` command line: the product's sub-commands, plus those other distributions register.

The product's own commands are modules of :mod:`poolwatch.commands`.  A separately installed
distribution adds commands through the ``poolwatch.commands`` entry-point group (the emulator's
``demo`` and ``emulate``).  A known optional command whose distribution is missing still parses,
and prints one line saying what to install.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from poolwatch import __version__

__all__ = ["COMMANDS", "OPTIONAL", "main"]

COMMANDS: tuple[str, ...] = ("serve", "generate", "check", "replay")
# optional commands -> what provides them (an entry point of group ``poolwatch.commands``)
OPTIONAL: dict[str, str] = {
    "demo": "poolwatch[emulator]",
    "emulate": "poolwatch[emulator]",
}
ENTRY_POINT_GROUP = "poolwatch.commands"
Plugins = Callable[[], Iterable[EntryPoint]]


def installed_commands() -> Iterable[EntryPoint]:
    """The sub-commands other installed distributions register (the emulator's)."""
    return entry_points(group=ENTRY_POINT_GROUP)


def _modules(plugins: Plugins) -> dict[str, ModuleType | None]:
    found: dict[str, ModuleType | None] = {
        name: importlib.import_module(f"poolwatch.commands.{name}") for name in COMMANDS
    }
    found |= dict.fromkeys(OPTIONAL)
    for ep in plugins():
        found[ep.name] = ep.load()
    return found


def _missing(name: str) -> Callable[[argparse.Namespace], int]:
    def run(_: argparse.Namespace) -> int:
        print(
            f"poolwatch {name}: not installed here; install it with: pip install '{OPTIONAL[name]}'",
            file=sys.stderr,
        )
        return 2

    return run


def _summary(module: ModuleType, name: str) -> str:
    doc = (module.__doc__ or name).strip().splitlines()[0]
    return doc.split(": ", 1)[1] if doc.startswith("``") and ": " in doc else doc


def build_parser(plugins: Plugins = installed_commands) -> argparse.ArgumentParser:
    """Every command; ``plugins`` lists the entry points of other distributions (tests pass
    their own)."""
    parser = argparse.ArgumentParser(
        prog="poolwatch", description="Memory-pool conservation monitoring for SGLang."
    )
    parser.add_argument("--version", action="version", version=f"poolwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _modules(plugins).items():
        if module is None:
            cmd = sub.add_parser(name, help=f"(needs {OPTIONAL[name]})", add_help=False)
            cmd.add_argument("rest", nargs=argparse.REMAINDER)
            cmd.set_defaults(_run=_missing(name), _missing=True)
            continue
        doc = _summary(module, name)
        cmd = sub.add_parser(name, help=doc, description=doc)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, plugins: Plugins = installed_commands) -> int:
    parser = build_parser(plugins)
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "_missing", False):  # a missing command's arguments are moot
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""``poolwatch`` command line: the product's sub-commands, plus those other distributions register.

The product's own commands are modules of :mod:`poolwatch.commands`.  A separately installed
distribution adds commands through the ``poolwatch.commands`` entry-point group (the emulator's
``demo`` and ``emulate``).  A known optional command whose distribution is missing still parses,
and prints how to install it from where the user stands (:func:`missing_hint`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from poolwatch import __version__
from poolwatch.engines import ENGINES

__all__ = [
    "COMMANDS",
    "EMULATOR_INSTALL",
    "OPTIONAL",
    "TORCH_CPU_INSTALL",
    "HelpFormatter",
    "build_parser",
    "main",
    "missing_hint",
    "summary",
]

# each command's module (``add_arguments``, ``run``; its docstring's first paragraph is its help)
COMMANDS: dict[str, str] = {
    "serve": "poolwatch.commands.serve",
    "doctor": "poolwatch.commands.doctor.command",
    "generate": "poolwatch.commands.generate",
    "check": "poolwatch.commands.check",
    "replay": "poolwatch.commands.replay.command",
    "incident": "poolwatch.commands.incident",
}
# optional commands -> the distribution that provides them (an entry point of group ``poolwatch.commands``)
OPTIONAL: dict[str, str] = {
    "demo": "poolwatch-emulator",
    "emulate": "poolwatch-emulator",
}
REPO_URL = "https://github.com/poolwatch/poolwatch"
# torch's CPU build: the emulator runs on CPU, and PyPI's Linux torch brings CUDA (~5 GB)
TORCH_CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
# poolwatch-emulator is not on PyPI yet: pip builds it from the repository's service/poolwatch_emulator
EMULATOR_INSTALL = (
    f'pip install "poolwatch-emulator @ git+{REPO_URL}@main#subdirectory=service/poolwatch_emulator"'
)
ENTRY_POINT_GROUP = "poolwatch.commands"
Plugins = Callable[[], Iterable[EntryPoint]]


def engines_named() -> str:
    """The engines poolwatch watches, as a user writes them (``SGLang and vLLM``)."""
    names = [e.title for e in ENGINES]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def installed_commands() -> Iterable[EntryPoint]:
    """The sub-commands other installed distributions register (the emulator's)."""
    return entry_points(group=ENTRY_POINT_GROUP)


def _modules(plugins: Plugins) -> dict[str, ModuleType | None]:
    found: dict[str, ModuleType | None] = {
        name: importlib.import_module(module) for name, module in COMMANDS.items()
    }
    found |= dict.fromkeys(OPTIONAL)
    for ep in plugins():
        found[ep.name] = ep.load()
    return found


def missing_hint(name: str) -> str:
    """What ``poolwatch NAME`` prints when the distribution providing it is not installed: commands
    that work with only the ``poolwatch`` wheel at hand (no package index carries the emulator)."""
    return (
        f"poolwatch {name}: not installed here; it comes with {OPTIONAL[name]}, which is not on PyPI yet.\n"
        "Install it into this environment, torch's CPU build first (PyPI's torch brings CUDA, ~5 GB):\n"
        f"  {TORCH_CPU_INSTALL}\n"
        f"  {EMULATOR_INSTALL}\n"
        f"(in a clone of {REPO_URL}, the second line can be: pip install ./service/poolwatch_emulator)\n"
    )


def _missing(name: str) -> Callable[[argparse.Namespace], int]:
    def run(_: argparse.Namespace) -> int:
        print(missing_hint(name), file=sys.stderr, end="")
        return 2

    return run


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with each option's real default appended unless its text already says
    it (an option whose default is None or False has none to state): no default is written by hand."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        quiet = default is None or default is False or default in ("", [], argparse.SUPPRESS)
        if quiet or not action.option_strings or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def summary(doc: str | None, name: str) -> str:
    """A command's one-line summary: its module docstring's first paragraph, whole, without its
    ``poolwatch NAME:`` lead or reST markup, starting with a capital."""
    first = " ".join((doc or name).strip().split("\n\n", 1)[0].split())
    if first.startswith("``") and ": " in first:
        first = first.split(": ", 1)[1]
    first = first.replace("``", "")
    return first[:1].upper() + first[1:]


def build_parser(plugins: Plugins = installed_commands) -> argparse.ArgumentParser:
    """Every command; ``plugins`` lists the entry points of other distributions (tests pass
    their own)."""
    parser = argparse.ArgumentParser(
        prog="poolwatch",
        description=f"Memory-pool conservation monitoring for {engines_named()}: a Prometheus sidecar, "
        "an in-process probe, alerts and dashboards.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"poolwatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in _modules(plugins).items():
        if module is None:
            cmd = sub.add_parser(name, help=f"(needs {OPTIONAL[name]})", add_help=False)
            cmd.add_argument("rest", nargs=argparse.REMAINDER)
            cmd.set_defaults(_run=_missing(name), _missing=True)
            continue
        doc = summary(module.__doc__, name)
        cmd = sub.add_parser(name, help=doc, description=doc, formatter_class=HelpFormatter)
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

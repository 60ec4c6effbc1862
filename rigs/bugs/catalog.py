"""The suite's entries, found in the package folders ``rigs/bugs/<engine>/`` (a module named like a
zoo id, ``s03.py``), in id order.  Reading the catalogue imports each entry module for its ``BUG``
(an entry imports no engine at its top: :mod:`rigs.bugs.entry`)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path

from rigs.bugs.entry import ENGINES, Bug

__all__ = ["HERE", "Bug", "bugs", "modules", "select"]

HERE = Path(__file__).resolve().parent
_MODULE = re.compile(r"[sv]\d\d")


def modules() -> list[str]:
    """Every entry module's dotted name, per engine in id order."""
    found = []
    for engine in ENGINES:
        names = sorted(p.stem for p in (HERE / engine).glob("*.py") if _MODULE.fullmatch(p.stem))
        found += [f"rigs.bugs.{engine}.{name}" for name in names]
    return found


def _bug(module: str) -> Bug:
    loaded = importlib.import_module(module)
    bug = getattr(loaded, "BUG", None)
    if not isinstance(bug, Bug):
        raise TypeError(f"{module} has no BUG (a rigs.bugs.entry.Bug)")
    if not callable(getattr(loaded, "run", None)):
        raise TypeError(f"{module} has no run(release)")
    if bug.module != module:
        raise ValueError(f"{module} holds {bug.id} of {bug.engine}: its module must be {bug.module}")
    return bug


def bugs() -> list[Bug]:
    """Every entry's :class:`Bug`, per engine in id order."""
    return [_bug(m) for m in modules()]


def select(ids: Iterable[str] = (), engine: str = "") -> list[Bug]:
    """The entries named by ``ids`` (all when empty), of ``engine`` (any when ""); an id or engine
    the catalogue lacks is a clear error."""
    wanted = [i.upper() for i in ids]
    everything = bugs()
    known = {b.id for b in everything}
    unknown = [i for i in wanted if i not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "empty"
        raise LookupError(f"no entry {', '.join(unknown)} in the suite ({listed})")
    if engine and engine not in ENGINES:
        raise LookupError(f"no engine {engine!r} (one of {', '.join(ENGINES)})")
    return [b for b in everything if (not wanted or b.id in wanted) and (not engine or b.engine == engine)]

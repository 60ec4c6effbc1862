"""``rigs/bugs/results.json``: what the last runs recorded, per bug its affected and its fixed
run (the rows of :func:`rigs.bugs.runner.run`).  Written deterministically (sorted keys, no times),
so a re-run that records the same is no diff, and the tier compares each re-run with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rigs.bugs.catalog import HERE

__all__ = ["PATH", "Results", "dump", "load", "save"]

PATH = HERE / "results.json"
Results = dict[str, dict[str, dict[str, Any]]]  # bug id -> "affected" / "fixed" -> row


def load(path: Path = PATH) -> Results:
    """The recorded runs ({} before the first)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    runs: Results = data["runs"]
    return runs


def dump(runs: Results) -> str:
    return json.dumps({"runs": runs}, indent=1, sort_keys=True) + "\n"


def save(runs: Results, path: Path = PATH) -> None:
    path.write_text(dump(runs))

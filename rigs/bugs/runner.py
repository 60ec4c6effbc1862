"""One entry run on one release: from the host (:func:`run`), in a fresh process of that release's
venv or overlay (:mod:`rigs.venv`), which calls the entry's ``run(release)`` and prints its row as
one JSON check line (:mod:`rigs.checks`)::

    <release venv>/bin/python -m rigs.bugs.runner rigs.bugs.sglang.s03 0.5.4.post1

A fix applied (``0.5.9+fix``) runs in the affected release's venv; the entry applies the fix.
``--guard`` (a double free's entry, ``run(release, guard=True)``): the same trigger with the
probe's guard on, the row adding what guard refused and the pools after
(:func:`rigs.bugs.sglang.flows.guarded`; ``tests/sglang_real/test_real_guard.py``).
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from rigs.bugs.entry import Bug
from rigs.checks import report
from rigs.venv import Venv

__all__ = ["run", "venv"]


def venv(bug: Bug, release: str) -> Venv:
    """Where ``bug``'s run on ``release`` happens: the engine table's venv (or overlay) of the
    release, or of the affected release for a fix applied."""
    base = bug.base(release)
    if bug.engine == "sglang":
        from rigs.sglang.releases import release as sglang_release

        return sglang_release(base).venv()
    from rigs.vllm.releases import release as vllm_release

    return vllm_release(base).venv()


def run(bug: Bug, release: str, timeout: float = 900, *, guard: bool = False) -> dict[str, Any]:
    """``bug``'s entry run on ``release`` in its venv (``guard``: with the probe's guard on): the row
    it returned (JSON-normalised: lists for tuples).  ``RuntimeError`` with the end of its output
    when the entry failed; :class:`rigs.venv.Unavailable` when the venv is not on this machine."""
    flags = ("--guard",) if guard else ()
    ran = venv(bug, release).run("rigs.bugs.runner", bug.module, release, *flags, timeout=timeout)
    rows = [r for r in ran.results if r.get("check") == f"{bug.id}@{release}"]
    if ran.returncode != 0 or len(rows) != 1 or not rows[0].get("ok"):
        detail = rows[0].get("detail") if rows else ""
        raise RuntimeError(
            f"{bug.id} on {release} failed (exit {ran.returncode}):\n{detail}\n{ran.stderr[-3000:]}"
        )
    row: dict[str, Any] = rows[0]["detail"]
    return row


def _inside(module: str, release: str, *flags: str) -> int:
    """In the release venv: the entry's run, its row printed as the check ``<id>@<release>``."""
    entry = importlib.import_module(module)
    bug: Bug = entry.BUG
    try:
        row = entry.run(release, guard=True) if "--guard" in flags else entry.run(release)
    except Exception:
        import traceback

        report(f"{bug.id}@{release}", False, traceback.format_exc()[-4000:])
        return 1
    report(f"{bug.id}@{release}", True, json.loads(json.dumps(row, default=str)))
    return 0


if __name__ == "__main__":
    sys.exit(_inside(*sys.argv[1:]))

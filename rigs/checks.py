"""What a script inside a release venv prints: one JSON line per check,
``{"check": name, "ok": bool, "detail": ...}``, read back by :meth:`rigs.venv.Venv.run`.

A check that raises is printed as failed with the end of its traceback, and the next one runs; the
time each named group of checks took goes to stderr.  The exit code of such a script is the number
of failed checks (:func:`failures`).  Stdlib only.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = ["failures", "report", "run", "run_all"]

_RESULTS: list[dict[str, Any]] = []  # this process's checks, in order (what it printed)


def report(check: str, ok: bool, detail: Any = None) -> bool:
    """Print one check's line; returns ``ok``."""
    _RESULTS.append({"check": check, "ok": bool(ok), "detail": detail})
    print(json.dumps(_RESULTS[-1], default=str), flush=True)
    return bool(ok)


def run(check: str, fn: Callable[[], object]) -> None:
    """Run ``fn`` (which reports its own checks); if it raises, report ``check`` failed with the
    end of the traceback."""
    started = time.perf_counter()
    try:
        fn()
    except Exception:
        report(check, False, traceback.format_exc()[-3000:])
    print(f"# {check}: {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)


def run_all(checks: Sequence[tuple[str, Callable[[], object]]], wanted: Collection[str] = ()) -> int:
    """:func:`run` each named check (only those in ``wanted`` when it is not empty); the failures."""
    for name, fn in checks:
        if not wanted or name in wanted:
            run(name, fn)
    return failures()


def failures() -> int:
    return sum(1 for r in _RESULTS if not r["ok"])

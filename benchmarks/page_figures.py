"""What both page benchmarks (``bench_page.py``, ``bench_page_vllm.py``) print and how they run a
stack: a share as a percentage, a spread as median / max, and a run retried when its stack does
not come up."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import TypeVar

__all__ = ["pct", "retried", "spread"]

R = TypeVar("R")


def pct(n: int, d: int) -> str:
    return "—" if d == 0 else f"{100 * n / d:.0f} %"


def spread(xs: list[float]) -> str:
    return "—" if not xs else f"{statistics.median(xs):.2f} / {max(xs):.2f}"


def retried(label: str, attempt: Callable[[], R]) -> R | list[str]:
    """``attempt()``; a stack that fails to come up (a port taken between choosing and binding it by
    another process on the machine, a slow start) is started again, fresh, up to three times;
    then the three failures, for the caller to leave the run out rather than end the benchmark."""
    failures: list[str] = []
    for _ in range(3):
        try:
            return attempt()
        except (AssertionError, OSError) as exc:
            failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            print(f"#   {label}: stack failed ({failures[-1]})", file=sys.stderr)
    return failures

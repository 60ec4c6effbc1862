"""Which pool error an SGLang report or crash names, and the known bugs it matches.  Pure data.

A leak report's figures give the class: a surplus is a double free, a deficit a leak, and a figure
that cannot be right (a negative ``protected=``, ``session_held=`` or ``available=``; ``protected``
above the pool) a *counter* error, whose sign nothing proves.  Messages of SGLang's own checks that
carry no figures (:data:`ERROR_MARKERS`: 0.5.15+ ``KV double free: sub-pool 0 has 3 duplicate
pages``, ``KV page use-after-free: ...``) and allocator asserts a crash's traceback ends in
(:data:`CRASH_ASSERTS`) are named by their text.  :data:`BUGS` says which bugs of
``/work/shared/bug-zoo.md`` a report's shape may be, the likeliest first; none when nothing narrows it.
"""

from __future__ import annotations

import re

from poolwatch.model.rank import Pool
from poolwatch.sources.logfile.errors import ErrorRule
from poolwatch.sources.logfile.events import ErrorClass

__all__ = ["BUGS", "COUNTER_BUGS", "CRASH_ASSERTS", "ERROR_MARKERS", "bugs_for"]

_DF, _LEAK, _COUNTER = ErrorClass.DOUBLE_FREE, ErrorClass.LEAK, ErrorClass.COUNTER


# SGLang's own checks that name a pool error without figures; raised or warned as a leak report is
# (``raise_error_or_warn``), read in the same positions.  0.5.23 ``invariant_checker.py``.
ERROR_MARKERS: tuple[ErrorRule, ...] = (
    ErrorRule(
        "kv-double-free",
        "0.5.15-current (SGLANG_CHECK_KV_PAGE_INVARIANTS)",
        re.compile(r"KV double free: sub-pool \d{1,4} has \d{1,12} duplicate pages"),
        _DF,
        "the same page twice on a free list",
        pool=Pool.FULL,
    ),
    ErrorRule(
        "kv-use-after-free",
        "0.5.15-current (SGLANG_CHECK_KV_PAGE_INVARIANTS)",
        re.compile(r"KV page use-after-free: \d{1,12} owner page refs are in the free pool"),
        _DF,
        "pages a live owner holds are on the free list (freed early)",
        pool=Pool.FULL,
    ),
    ErrorRule(
        "pool-bytes",
        "0.5.23-current",
        re.compile(r"pool-bytes memory leak detected!"),
        _LEAK,
        "the allocator's byte accounting disagrees with its slots",
    ),
)

# Allocator asserts a scheduler crash's traceback can end in (the statement Python prints under the
# last frame, or the exception line).
CRASH_ASSERTS: tuple[ErrorRule, ...] = (
    ErrorRule(
        "swa-over-free",
        "0.5.12-current",
        re.compile(r"swa_attn_allocator\.available_size\(\) <= (?:self\.)?swa_attn_allocator\.size"),
        _DF,
        "more SWA pages returned to the allocator than it has",
        pool=Pool.SWA,
        bugs=("S08", "S07"),
    ),
)

# (report formats, pool, class) -> the bugs the report's shape may be, likeliest first
BUGS: tuple[tuple[frozenset[str], Pool, ErrorClass, tuple[str, ...]], ...] = (
    (frozenset({"kv-allocator-0.5"}), Pool.MAMBA, _DF, ("S01",)),
    (frozenset({"kv-allocator-0.5", "pools-0.5.12"}), Pool.MAMBA, _LEAK, ("S04", "S05", "S03")),
    (frozenset({"busy-pools-0.5.12"}), Pool.SWA, _DF, ("S07",)),
    (frozenset({"pools-0.5.12"}), Pool.SWA, _DF, ("S09", "S07")),
    (frozenset({"pools-0.5.12"}), Pool.FULL, _DF, ("S09",)),
    (frozenset({"kv-allocator-0.4.6"}), Pool.FULL, _DF, ("S22",)),
    (frozenset({"kv-allocator-0.5"}), Pool.FULL, _LEAK, ("S02", "S10")),
    (frozenset({"pools-0.5.12"}), Pool.FULL, _LEAK, ("S10", "S11", "S20")),
    (frozenset({"kv-warning-0.3"}), Pool.FULL, _LEAK, ("S28", "S24")),
    (frozenset({"req-pool-0.4.6", "req-warning-0.3", "req-warning-0.2"}), Pool.REQ, _LEAK, ("S23",)),
)
# a counter error, by the figure that cannot be right
COUNTER_BUGS = {"protected<0": ("S13",), "protected>size": ("S12",)}


def bugs_for(fmt: str, pool: Pool, cls: ErrorClass) -> tuple[str, ...]:
    """The bugs a report of format ``fmt`` showing ``cls`` on ``pool`` may be."""
    return next((bugs for names, p, c, bugs in BUGS if fmt in names and p is pool and c is cls), ())

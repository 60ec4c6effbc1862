"""SGLang's own accounting failures, read out of a log record.  Pure.

The messages of every release (reference §1.4), for example::

    token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, ...
    mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, ...
    pool memory leak detected! [full] total=..., available=..., evictable=..., protected=..., ...
    req_to_token_pool memory leak detected!available_size=..., total_size=...
    Mem Leak Detected! total_tokens=... vs self.max_total_num_tokens=...
    Full Pool Mem Leak Detected! [full] total=..., ..., uncached=...
    Mamba Radix tree sanity check failed, ping @...: ...

The figures of a leak message were read by SGLang's check at one loop boundary while it judged
the scheduler idle, i.e. with nothing held by requests (``uncached`` is what the busy check
counts as held); they are returned as exact :class:`~poolwatch.model.PoolAccount` values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from poolwatch.model import Exactness, Incident, IncidentKind, Pool, PoolAccount

__all__ = ["find_incidents", "parse_leak_figures"]

_LEAK = re.compile(r"[\w\-]+ memory leak detected!")
_BUSY = re.compile(r"(?:(?:Full|SWA) Pool )?Mem Leak Detected!")
_TREE = re.compile(r"\w* ?Radix tree sanity check failed")
_MARKERS = (
    (_LEAK, IncidentKind.LEAK_DETECTED),
    (_BUSY, IncidentKind.BUSY_CHECK_FAILED),
    (_TREE, IncidentKind.TREE_SANITY_FAILED),
)
_FIELD = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*(?:\(\))?)=(-?\d+)(?![\d.])")
_TAGGED = re.compile(r"\[(full|swa|mamba)\]")
_MAX_FIGURE_LINES = 8
_MAX_MESSAGE = 2000

_TAGGED_FIGURES = {
    "total": "size",
    "available": "available",
    "evictable": "evictable",
    "protected": "protected",
    "session_held": "session_held",
    "uncached": "held",
}


def find_incidents(lines: Sequence[str], at: float) -> list[Incident]:
    """Every accounting incident in one record (a crash traceback can hold a leak message too)."""
    found: list[Incident] = []
    for index, line in enumerate(lines):
        kind = _kind(line)
        if kind is None:
            continue
        figure_lines = _figure_lines(lines, index)
        pools = parse_leak_figures(figure_lines, req_pool="req_to_token_pool" in line)
        message = "\n".join(figure_lines)[:_MAX_MESSAGE]
        found.append(Incident(kind, message, at, pools))
    return found


def _kind(line: str) -> IncidentKind | None:
    for pattern, kind in _MARKERS:
        if _reported(pattern, line):
            return kind
    return None


def _reported(pattern: re.Pattern[str], line: str) -> bool:
    """A marker right after a quote is source code quoted in a traceback or an issue, not a report."""
    return any(m.start() == 0 or line[m.start() - 1] not in "\"'" for m in pattern.finditer(line))


def _figure_lines(lines: Sequence[str], start: int) -> list[str]:
    """The marker line and the following lines that carry ``name=number`` figures."""
    out = [lines[start]]
    for line in lines[start + 1 : start + _MAX_FIGURE_LINES]:
        if not _FIELD.search(line) or _kind(line) is not None:
            break
        out.append(line)
    return out


def parse_leak_figures(lines: Sequence[str], *, req_pool: bool = False) -> tuple[PoolAccount, ...]:
    """The pool accounts stated in a leak message's lines, in pool order."""
    figures: dict[Pool, dict[str, int]] = {}
    for line in lines:
        tagged = _TAGGED.search(line)
        for name, value in _FIELD.findall(line):
            placed = _place(name, tagged[1] if tagged else None, req_pool)
            if placed is not None:
                figures.setdefault(placed[0], {}).setdefault(placed[1], int(value))
    accounts = (_account(pool, f) for pool, f in figures.items())
    order = list(Pool)
    return tuple(sorted((a for a in accounts if a is not None), key=lambda a: order.index(a.pool)))


def _place(name: str, tag: str | None, req_pool: bool) -> tuple[Pool, str] | None:
    """Which pool and which figure a ``name=`` field of the message is."""
    if tag is not None:
        figure = _TAGGED_FIGURES.get(name)
        return None if figure is None else (Pool(tag), figure)
    bare = name.removeprefix("self.").removesuffix("()")
    figure = _figure(bare)
    if figure is None:
        return None
    if req_pool:
        return Pool.REQ, figure
    if "mamba" in bare:
        return Pool.MAMBA, figure
    if bare.startswith("swa_") or ".swa_" in bare:
        return Pool.SWA, figure
    return Pool.FULL, figure


def _figure(bare: str) -> str | None:
    last = bare.rsplit(".", 1)[-1]
    for suffix, figure in (
        ("available_size", "available"),
        ("evictable_size", "evictable"),
        ("protected_size", "protected"),
        ("session_held", "session_held"),
        ("total_tokens", "accounted"),
    ):
        if last.endswith(suffix):
            return figure
    if last in ("size", "total_size", "max_total_num_tokens") or last.endswith("tokens_per_layer"):
        return "size"
    return None


def _account(pool: Pool, f: dict[str, int]) -> PoolAccount | None:
    if "size" not in f:
        return None
    if "accounted" in f:  # the busy check states only the sum of every term
        f = {"size": f["size"], "available": f["accounted"]}
    if "available" not in f:
        return None
    return PoolAccount(
        pool=pool,
        size=f["size"],
        available=f["available"],
        evictable=f.get("evictable", 0),
        protected=f.get("protected", 0),
        held=f.get("held", 0),
        session_held=f.get("session_held", 0),
        exactness=Exactness.EXACT,
    )

"""SGLang's own accounting failures, read out of a log record.  Pure.

Every release's self-check messages are in :data:`~poolwatch.sources.sglang.log.formats.LEAK_FORMATS`
(0.1.x ``KV cache pool leak detected!`` to 0.5.12+ ``pool memory leak detected! [full] total=…``
and the busy check's ``SWA Pool Mem Leak Detected!``), for example::

    token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, ...
    mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, ...
    scheduler.py:1326: UserWarning: token_to_kv_pool_allocator memory leak detected! available_size=...

The figures of a leak message were read by SGLang's check at one loop boundary while it judged
the scheduler idle, i.e. with nothing held by requests (``uncached`` is what the busy check
counts as held); they are returned as exact :class:`~poolwatch.model.rank.PoolAccount` values.  Where
a family's ``available_size`` already includes the evictable slots, evictable is not counted a
second time.  A number followed by ``…`` (a line cut at its length bound) is not read.

A report wrapped mid-field (a collector that splits long lines, CRI's partial ``P`` records, a
terminal's hard wrap: ``full_evict`` / ``able_size=1066``, ``size=166`` / ``3695, ...``) is cut
where a line ends inside a token and the next goes on with it: the fields touching such a cut are
not read, and the pool's figures the report does not state are then *unknown* (``None``, named in
``unreadable``), never the 0 a complete report of the family would imply.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.model.snapshot import Incident
from poolwatch.sources.sglang.log.formats import LEAK_FORMATS, LeakFormat

__all__ = ["find_incidents", "match_format", "parse_leak_figures"]

_FIELD = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*(?:\(\))?)=(-?\d+)(?![\d.\u2026])")
_TOKEN_END = re.compile(r"[\w.()=\-]+$")  # a line's last token, when nothing separates it from the end
_TOKEN_START = re.compile(r"^[\w.()=\-]+")
_DEFAULTED = ("evictable", "protected", "held", "session_held")  # 0 when a whole report omits them
_TAGGED = re.compile(r"\[(full|swa|mamba)\]")
_HINTS = ("etected", "anity", "FAILED")  # every marker holds one: most lines skip the regexes
_MAX_FIGURE_LINES = 8
_GENERIC = next(f for f in LEAK_FORMATS if f.name == "pools-0.5.12")
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
        fmt = match_format(line)
        if fmt is None:
            continue
        figure_lines = _figure_lines(lines, index, fmt)
        pools = parse_leak_figures(figure_lines, fmt=fmt)
        message = "\n".join(figure_lines)[:_MAX_MESSAGE]
        found.append(Incident(fmt.kind, message, at, pools))
    return found


def match_format(line: str) -> LeakFormat | None:
    """The self-check format whose marker ``line`` reports (``None`` for most lines)."""
    if not any(hint in line for hint in _HINTS):
        return None
    for fmt in LEAK_FORMATS:
        if _reported(fmt.marker, line):
            return fmt
    return None


def _reported(pattern: re.Pattern[str], line: str) -> bool:
    """A marker right after a quote is source code quoted in a traceback or an issue, not a report."""
    return any(m.start() == 0 or line[m.start() - 1] not in "\"'" for m in pattern.finditer(line))


def _figure_lines(lines: Sequence[str], start: int, fmt: LeakFormat) -> list[str]:
    """The marker line and the lines around it that carry ``name=number`` figures."""
    if fmt.figures_before:
        return [*lines[max(start - 1, 0) : start], lines[start]]
    out = [lines[start]]
    for line in lines[start + 1 : start + _MAX_FIGURE_LINES]:
        if not _FIELD.search(line) or match_format(line) is not None:
            break
        out.append(line)
    return out


def parse_leak_figures(lines: Sequence[str], *, fmt: LeakFormat | None = None) -> tuple[PoolAccount, ...]:
    """The pool accounts stated in a leak message's lines, in pool order (``fmt``: the format
    of the message, by default the one its first line reports)."""
    fmt = fmt or (match_format(lines[0]) if lines else None) or _GENERIC
    figures: dict[Pool, dict[str, int]] = {}
    cuts = [_cut(a, b) for a, b in itertools.pairwise(lines)]
    for i, line in enumerate(lines):
        tagged = _TAGGED.search(line)
        after, before = i > 0 and cuts[i - 1], i < len(cuts) and cuts[i]
        for name, value in _fields(line, fmt, cut=(after, before)):
            placed = _place(name, tagged[1] if tagged else None, fmt)
            if placed is not None:
                figures.setdefault(placed[0], {}).setdefault(placed[1], int(value))
    whole = not any(cuts)
    accounts = (_account(pool, f, whole=whole) for pool, f in figures.items())
    order = list(Pool)
    return tuple(sorted((a for a in accounts if a is not None), key=lambda a: order.index(a.pool)))


def _cut(line: str, following: str) -> bool:
    """Whether a token was cut where ``line`` ends and ``following`` goes on: nothing separates
    them, and either the next line starts inside a token (a digit, ``=``, ``.``) or this one ends
    with something that is not a whole ``name=number`` field (a name cut short)."""
    tail, head = _TOKEN_END.search(line), _TOKEN_START.match(following)
    if tail is None or head is None:
        return False
    return head[0][0] in "0123456789=.-" or _FIELD.fullmatch(tail[0]) is None


def _fields(line: str, fmt: LeakFormat, cut: tuple[bool, bool] = (False, False)) -> list[tuple[str, str]]:
    """The ``name=number`` fields of ``line``, but those touching a cut (``cut``: at its start,
    at its end)."""
    found = [
        (m[1], m[2])
        for m in _FIELD.finditer(line)
        if not (cut[0] and m.start() == 0) and not (cut[1] and m.end() == len(line))
    ]
    for alias in fmt.aliases:
        m = re.search(re.escape(alias) + r"=(-?\d+)(?![\d.\u2026])", line)
        if m is not None:
            found.append((alias, m[1]))
    return found


def _place(name: str, tag: str | None, fmt: LeakFormat) -> tuple[Pool, str] | None:
    """Which pool and which figure a ``name=`` field of the message is."""
    if tag is not None:
        figure = _TAGGED_FIGURES.get(name)
        return None if figure is None else (Pool(tag), figure)
    alias = fmt.aliases.get(name)
    bare = name.removeprefix("self.").removesuffix("()")
    figure = alias or _figure(bare)
    if figure is None:
        return None
    if figure == "available" and bare == "available_size" and fmt.available_includes_evictable:
        figure = "available_with_evictable"
    if fmt.pool is not None:
        return fmt.pool, figure
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
    sizes = ("size", "total_size", "max_total_num_tokens", "max_total_num_token")
    if last in sizes or last.endswith("tokens_per_layer"):
        return "size"
    return None


def _account(pool: Pool, f: dict[str, int], *, whole: bool = True) -> PoolAccount | None:
    """One pool's account; a term the report does not state is 0 when the report is ``whole``
    (the family's check does not count it), unknown when the report was cut (it may be lost)."""
    if "size" not in f:
        return None
    if "accounted" in f:  # the busy check states only the sum of every term
        f = {"size": f["size"], "available": f["accounted"]}
    if "available_with_evictable" in f and not ("available" in f and "evictable" in f):
        f = {**f, "available": f["available_with_evictable"], "evictable": 0}  # evictable is inside
    if "available" not in f:
        return None
    terms = {name: f.get(name, 0) if whole else f.get(name) for name in _DEFAULTED}
    return PoolAccount(
        pool=pool,
        size=f["size"],
        available=f["available"],
        exactness=Exactness.EXACT,
        unreadable=tuple(name for name, value in terms.items() if value is None),
        **terms,
    )

"""SGLang's own accounting reports, read out of a record whole or not at all.  Pure.

Every release's self-check messages are in :data:`~poolwatch.sources.sglang.log.formats.LEAK_FORMATS`
(0.1.x ``KV cache pool leak detected!`` to 0.5.12+ ``pool memory leak detected! [full] total=…``
and the busy check's ``SWA Pool Mem Leak Detected!``), for example::

    ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, ...
    mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, ...

**Where a report counts.**  SGLang writes a report in three positions only: as the message of its own
log line (the non-strict warning), as the exception line of a traceback (``ValueError: …``,
``AssertionError: …``), or through Python's ``warnings`` (``…/scheduler.py:1326: UserWarning: …``).
So a marker counts only at the start of a line (after such an exception or warning lead), and a
continuation line counts only in a record that is a scheduler crash's traceback or Python's own
stderr output: a marker inside a request id, a prompt or another message never reads as a report.

**Whole or not at all.**  The figures were read by SGLang's check at one loop boundary, so a whole
report is exact (:class:`~poolwatch.model.rank.PoolAccount` ``EXACT``).  Each family states the same
figures for a pool, in the same order (``LeakFormat.figures``); a pool's report lacking one was cut
(an excerpt's end, a field touching an unjoined wrap, a number followed by ``…``) and its figures
are then *unknown*, never the 0 a whole report would imply: only a surplus the figures that are
there prove whatever the missing ones are (the missing ones all counts that cannot be negative) is
kept, as a bound.  A figure that cannot be right (a negative term, ``protected`` above the pool) is
a counter error: the pool's figures prove no sign.

Kept whole: where a report counts, which lines are its figures and what a cut report still proves
are one reading of one report; split apart, a part could read a figure the others had ruled out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from poolwatch.conservation import Balance, assess
from poolwatch.model.rank import Exactness, IncidentKind, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Incident
from poolwatch.sources.logfile.errors import ErrorRule
from poolwatch.sources.logfile.events import ErrorClass, PoolError
from poolwatch.sources.sglang.log.errors import COUNTER_BUGS, ERROR_MARKERS, bugs_for
from poolwatch.sources.sglang.log.formats import LEAK_FORMATS, LeakFormat

__all__ = ["Report", "find_reports", "parse_leak_figures", "report_at"]

_FIELD = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*(?:\(\))?)=(-?\d+)(?![\d.\u2026])")
_TOKEN_END = re.compile(r"[\w.()=\-]+$")  # a line's last token, when nothing separates it from the end
_TOKEN_START = re.compile(r"^[\w.()=\-]+")
_TAGGED = re.compile(r"\[(full|swa|mamba|mamba-active|mamba-int8)\]")
_TAG_POOL = {"full": Pool.FULL, "swa": Pool.SWA, "mamba": Pool.MAMBA, "mamba-active": Pool.MAMBA}
_TAG_POOL["mamba-int8"] = Pool.MAMBA_CKPT
_LEAD = re.compile(
    r"[ \t]*(?:(?:[A-Za-z_][\w.]*)?(?:Error|Exception): |\S{1,500}\.py:\d{1,7}: \w*Warning: )?"
)
_HINTS = ("etected", "anity", "FAILED", "free")  # every marker holds one: most lines skip the regexes
_MAX_FIGURE_LINES = 8
_GENERIC = next(f for f in LEAK_FORMATS if f.name == "pools-0.5.12")
_MAX_MESSAGE = 2000
_COUNTS = ("held", "session_held")  # terms that cannot be negative: a bound may ignore them
_TERMS = ("available", "evictable", "protected", "held", "session_held")
_TAGGED_FIGURES = {
    "total": "size",
    "available": "available",
    "evictable": "evictable",
    "protected": "protected",
    "session_held": "session_held",
    "uncached": "held",
}


@dataclass(frozen=True, slots=True)
class Report:
    """One report found in a record: the incident and the pool error it names."""

    incident: Incident
    error: PoolError | None


def report_at(line: str) -> LeakFormat | ErrorRule | None:
    """The report whose marker starts ``line`` (after spaces and an exception or warning lead), else
    ``None``: a marker further in (source code quoted in a traceback, a request's text) is none."""
    if not any(hint in line for hint in _HINTS):
        return None
    lead = _LEAD.match(line)
    pos = lead.end() if lead is not None else 0
    for fmt in LEAK_FORMATS:
        if fmt.marker.match(line, pos):
            return fmt
    return next((m for m in ERROR_MARKERS if m.text.match(line, pos)), None)


def find_reports(lines: Sequence[str], at: float, *, first: bool = True, rest: bool = True) -> list[Report]:
    """Every report in a record's lines: its first line is read when ``first``, the others when
    ``rest`` (the caller knows which positions are SGLang's own, see the module docstring)."""
    found: list[Report] = []
    for index, line in enumerate(lines):
        if not (first if index == 0 else rest):
            continue
        what = report_at(line)
        if isinstance(what, LeakFormat):
            found.append(_report(lines, index, what, at))
        elif what is not None:
            error = PoolError(what.cls, what.what, what.pool, what.bugs)
            found.append(Report(Incident(IncidentKind.LEAK_DETECTED, line[:_MAX_MESSAGE], at), error))
    return found


def _report(lines: Sequence[str], index: int, fmt: LeakFormat, at: float) -> Report:
    fmt = _family(lines, index, fmt)
    figure_lines = _figure_lines(lines, index, fmt)
    pools = parse_leak_figures(figure_lines, fmt=fmt)
    message = "\n".join(figure_lines)[:_MAX_MESSAGE]
    return Report(Incident(fmt.kind, message, at, pools), _error(fmt, pools, message))


def _family(lines: Sequence[str], index: int, fmt: LeakFormat) -> LeakFormat:
    """The report's family, told by what follows its marker even when that went onto the next
    line (0.4.6's ``detected! available_size=N, protected_size=`` and 0.5's bare marker differ only
    there: reading one as the other would count evictable twice)."""
    line = lines[index]
    if index + 1 >= len(lines) or _FIELD.search(line) or not _FIELD.search(lines[index + 1]):
        return fmt
    joined = report_at(f"{line.rstrip()} {lines[index + 1].lstrip()}")
    return joined if isinstance(joined, LeakFormat) else fmt


def _figure_lines(lines: Sequence[str], start: int, fmt: LeakFormat) -> list[str]:
    """The marker line and the lines around it that carry ``name=number`` figures."""
    if fmt.figures_before:
        return [*lines[max(start - 1, 0) : start], lines[start]]
    out = [lines[start]]
    for line in lines[start + 1 : start + _MAX_FIGURE_LINES]:
        if not _FIELD.search(line) or report_at(line) is not None:
            break
        out.append(line)
    return out


def parse_leak_figures(lines: Sequence[str], *, fmt: LeakFormat | None = None) -> tuple[PoolAccount, ...]:
    """The pool accounts a report's lines state, in pool order (``fmt``: the report's format, by
    default the one its first line starts with)."""
    first = report_at(lines[0]) if lines else None
    fmt = fmt or (first if isinstance(first, LeakFormat) else None) or _GENERIC
    figures: dict[Pool, dict[str, int]] = {}
    cuts = [_cut(a, b) for a, b in itertools.pairwise(lines)]
    for i, line in enumerate(lines):
        tagged = _TAGGED.search(line)
        after, before = i > 0 and cuts[i - 1], i < len(cuts) and cuts[i]
        for name, value in _fields(line, fmt, cut=(after, before)):
            placed = _place(name, tagged[1] if tagged else None, fmt)
            if placed is not None:
                figures.setdefault(placed[0], {}).setdefault(placed[1], int(value))
    accounts = (_account(pool, f, fmt) for pool, f in figures.items())
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
    """The ``name=number`` fields of ``line``, but those touching a cut (at its start, at its end)."""
    found = [
        (m[1], m[2])
        for m in _FIELD.finditer(line)
        if not (cut[0] and m.start() == 0) and not (cut[1] and m.end() == len(line))
    ]
    for alias in fmt.aliases:
        m = re.search(re.escape(alias) + r"=(-?\d+)(?![\d.\u2026])", line)
        if m is not None and not (cut[1] and m.end() == len(line)):
            found.append((alias, m[1]))
    return found


def _place(name: str, tag: str | None, fmt: LeakFormat) -> tuple[Pool, str] | None:
    """Which pool and which figure a ``name=`` field of the report is."""
    if tag is not None:
        figure = _TAGGED_FIGURES.get(name)
        return None if figure is None else (_TAG_POOL[tag], figure)
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


def _account(pool: Pool, read: Mapping[str, int], fmt: LeakFormat) -> PoolAccount | None:
    """One pool's account: exact when the report states every figure of its family, a bound or
    unknown when it was cut, figure-less when a figure cannot be right (see the module docstring)."""
    if "size" not in read:
        return None
    size = read["size"]
    missing = tuple(name for name in fmt.figures if name not in read)
    f = dict(read)
    if "accounted" in f:  # the busy check states only the sum of every term
        f = {"size": size, "available": f["accounted"]}
    if "available_with_evictable" in f and not ("available" in f and "evictable" in f):
        f = {**f, "available": f["available_with_evictable"], "evictable": 0}  # evictable is inside
    wrong = _wrong(f, size)
    if wrong:
        return PoolAccount(pool, size, unreadable=wrong)
    if missing or "available" not in f:
        return PoolAccount(
            pool, size, used=_surplus_bound(f, size, missing), unreadable=missing or ("available",)
        )
    get = f.get  # a term the family does not state is 0
    return PoolAccount(
        pool,
        size,
        f["available"],
        get("evictable", 0),
        get("protected", 0),
        get("held", 0),
        get("session_held", 0),
        exactness=Exactness.EXACT,
    )


def _wrong(f: Mapping[str, int], size: int) -> tuple[str, ...]:
    """The figures that cannot be right: a negative term, ``protected`` above the pool."""
    wrong = tuple(f"{name}<0" for name in _TERMS if f.get(name, 0) < 0)
    return wrong + (("protected>size",) if f.get("protected", 0) > size else ())


def _surplus_bound(f: Mapping[str, int], size: int, missing: tuple[str, ...]) -> int | None:
    """``size - available - evictable - protected`` when the figures that are there prove a surplus
    whatever the missing ones are (counts that cannot be negative), else ``None``."""
    if any(name not in _COUNTS for name in missing) or "available" not in f or "evictable" not in f:
        return None
    bound = size - f["available"] - f["evictable"] - f.get("protected", 0)
    return bound if bound < 0 else None


def _error(fmt: LeakFormat, pools: tuple[PoolAccount, ...], text: str) -> PoolError | None:
    """The pool error a report names: a counter error first, then the first imbalanced pool."""
    checker = "SGLang's busy check" if fmt.kind is IncidentKind.BUSY_CHECK_FAILED else "SGLang's idle check"
    for account in pools:
        wrong = [w for w in account.unreadable if "<" in w or ">" in w]
        if wrong:
            bugs = tuple(b for w in wrong for b in COUNTER_BUGS.get(w, ()))
            return PoolError(
                ErrorClass.COUNTER,
                f"{', '.join(wrong)} in {checker}'s report: no sign proven",
                account.pool,
                bugs,
            )
    phase = Phase.BUSY if fmt.kind is IncidentKind.BUSY_CHECK_FAILED else Phase.IDLE
    for balance, cls in ((Balance.SURPLUS, ErrorClass.DOUBLE_FREE), (Balance.DEFICIT, ErrorClass.LEAK)):
        for account in pools:
            if assess(account, phase).balance is balance:
                return PoolError(
                    cls, f"reported by {checker}", account.pool, bugs_for(fmt.name, account.pool, cls)
                )
    if "leaked_mamba_pages={" in text:
        cls = ErrorClass.LEAK
        return PoolError(
            cls, f"pages {checker} found leaked", Pool.MAMBA, bugs_for(fmt.name, Pool.MAMBA, cls)
        )
    return None

"""Markdown that no bundle string can escape: every value from an incident's body shown as inert
inline code or a plain figure (no heading, link, emphasis, HTML, control character or table break a
snapshot's strings made), and the page's own words marked as such (:class:`Md`).  Pure."""

from __future__ import annotations

import time
from typing import Any

from poolwatch.inert import inert

__all__ = ["Md", "cell", "code", "labelled", "listed", "num", "offset", "table", "when", "whole"]


class Md(str):
    """A piece of Markdown this module wrote itself (every untrusted value in it already escaped)."""

    __slots__ = ()


def when(t: Any) -> str:
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < 1e11:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def code(value: Any, table: bool = True) -> Md:
    """Any value from a body as inline code: nothing in it is Markdown (no heading, link,
    emphasis or HTML), no control character reaches the page (:func:`~poolwatch.inert.inert`),
    a backtick cannot close the span, and in a table a ``|`` cannot end the cell."""
    text = inert(str(value)).replace("`", "'")
    if not text:
        return Md("")
    return Md("`" + (text.replace("|", "\\|") if table else text) + "`")


def num(value: Any) -> Md:
    """A figure as it is; anything else a figure's place holds, as code (``?`` for unknown)."""
    if value is None:
        return Md("?")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Md(str(value))
    return code(value)


def cell(value: Any) -> Md:
    if isinstance(value, Md):
        return value
    return num(value)


def listed(values: Any, limit: int = 64) -> Md:
    """Values from a body, each as code, comma-separated (at most ``limit``, then ``...``)."""
    if not isinstance(values, list):
        return code(values)
    shown = ", ".join(cell(v) for v in values[:limit])
    return Md(shown + (", ..." if len(values) > limit else ""))


def table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def labelled(rows: list[list[Any]]) -> list[list[Any]]:
    """Rows of a two-column table whose first cell is this module's own word."""
    return [[Md(label), value] for label, value in rows]


def whole(value: Any) -> int:
    """A count from a body; 0 for anything that is not an int."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def offset(at: Any, start: Any) -> Md:
    """Seconds from the first sighting, ``+1.000``; ``?`` when either is not a time."""
    if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in (at, start)):
        return Md("?")
    return Md(f"{at - start:+.3f}")

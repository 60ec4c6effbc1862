"""Which metric names a PromQL expression selects, and which of them the catalogue lacks (the
rules' and the families' tests share it)."""

from __future__ import annotations

import re

from poolwatch.catalog.metrics import by_name

__all__ = ["metric_names", "uncatalogued"]

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "and",
    "or",
    "unless",
    "bool",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, matchers, ranges, label lists removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if match.group() not in _KEYWORDS and not following.startswith("("):
            names.add(match.group())
    return names


def uncatalogued(expr: str) -> set[str]:
    out = set()
    for name in metric_names(expr):
        try:
            by_name(name)
        except KeyError:
            out.add(name)
    return out

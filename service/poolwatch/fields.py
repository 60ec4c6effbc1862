"""Bounded, encodable, range-checked JSON values: the primitives every edge parser is built from.

A value that passes here can be encoded (UTF-8 text without lone surrogates, integers a float
holds exactly, finite floats), is of bounded size (text length, list length, object size), and
is in range (pool figures and counts are never negative).  Anything else raises
:class:`FieldError` naming the field, with the offending value shown at most 60 characters long,
so one poisoned payload is one short, loggable reason -- never an exception further down (an
exporter that cannot encode a label, a float overflow in arithmetic).  Pure and stdlib-only (the
probe imports it through the codec).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "MAX_INT",
    "MAX_ITEMS",
    "MAX_NAME",
    "MAX_TEXT",
    "FieldError",
    "boolean",
    "count",
    "cut",
    "enumerated",
    "integer",
    "items",
    "mapping",
    "number",
    "opt_count",
    "shown",
    "text",
]

MAX_INT = 2**53  # the largest integer a JSON number (a double) holds exactly
MAX_NUMBER = 1e15  # seconds, costs, ages: anything larger is not a measurement
MAX_NAME = 256  # names: workers, models, queues, hooks, ids
MAX_TEXT = 4096  # messages
MAX_ITEMS = 4096  # any list or object

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")


class FieldError(ValueError):
    """A value outside what the schema allows; the message names the field."""


def shown(raw: object, limit: int = 60) -> str:
    """``repr(raw)`` cut to ``limit`` characters (a 5,000-digit number stays a short message)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > MAX_INT:
        return f"an integer of {len(str(abs(raw))) if abs(raw) < 10**4000 else 'over 4000'} digits"
    text_ = repr(raw) if not isinstance(raw, str) else repr(raw.encode("utf-8", "backslashreplace").decode())
    return text_ if len(text_) <= limit else text_[: limit - 3] + "..."


def mapping(raw: object, where: str, limit: int = MAX_ITEMS) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise FieldError(f"{where}: expected an object, got {type(raw).__name__}")
    if len(raw) > limit:
        raise FieldError(f"{where}: more than {limit} entries ({len(raw)})")
    return raw


def items(raw: object, where: str, item: Callable[[Any, str], T], limit: int = MAX_ITEMS) -> tuple[T, ...]:
    if not isinstance(raw, list):
        raise FieldError(f"{where}: expected a list, got {type(raw).__name__}")
    if len(raw) > limit:
        raise FieldError(f"{where}: more than {limit} items ({len(raw)})")
    return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(raw))


def enumerated(kind: type[E], raw: object, where: str) -> E:
    try:
        return kind(raw)
    except (ValueError, TypeError):
        allowed = ", ".join(str(m.value) for m in kind)
        raise FieldError(f"{where}: {shown(raw)} is not one of {allowed}") from None


def integer(raw: object, where: str, low: int = -MAX_INT, high: int = MAX_INT) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise FieldError(f"{where}: expected an integer, got {shown(raw)}")
    if not low <= raw <= high:
        raise FieldError(f"{where}: expected {low}..{high}, got {shown(raw)}")
    return raw


def count(raw: object, where: str) -> int:
    """A figure or counter: an integer ``0 .. 2**53`` (a negative slot count is impossible)."""
    return integer(raw, where, 0, MAX_INT)


def opt_count(raw: object, where: str) -> int | None:
    return None if raw is None else count(raw, where)


def number(raw: object, where: str, low: float = -MAX_NUMBER, high: float = MAX_NUMBER) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise FieldError(f"{where}: expected a finite number, got {shown(raw)}")
    value = float(raw) if not isinstance(raw, int) or abs(raw) <= MAX_INT else math.inf
    if not math.isfinite(value) or not low <= value <= high:
        raise FieldError(f"{where}: expected a finite number {low:g}..{high:g}, got {shown(raw)}")
    return value


def text(raw: object, where: str, limit: int = MAX_NAME) -> str:
    if not isinstance(raw, str):
        raise FieldError(f"{where}: expected a string, got {shown(raw)}")
    if len(raw) > limit:
        raise FieldError(f"{where}: longer than {limit} characters ({len(raw)})")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise FieldError(f"{where}: not encodable text (a lone surrogate?): {shown(raw)}") from None
    return raw


def cut(raw: str, limit: int) -> str:
    """``raw`` at most ``limit`` characters long: past it, its start and what was cut, said in the
    text (``... [… 2,560 characters cut]``), so a writer never writes what its reader refuses and a
    reader of the text knows it is not whole.  Text within ``limit`` is returned as it is."""
    if len(raw) <= limit:
        return raw
    mark = f" [… {len(raw):,} characters cut]"  # no shorter than the mark written below
    keep = limit - len(mark)
    if keep < 1:
        return raw[:limit]
    return raw[:keep] + f" [… {len(raw) - keep:,} characters cut]"


def boolean(raw: object, where: str) -> bool:
    if not isinstance(raw, bool):
        raise FieldError(f"{where}: expected true or false, got {shown(raw)}")
    return raw

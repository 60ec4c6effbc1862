"""Reading a foreign object that may not have the shape we expect, without ever raising.

A :class:`Reading` is one pass over a scheduler: every attribute path that could not be read
(missing, or a property that raised) is noted once, with the exception, so the snapshot can say
what it could not read and the probe's health can count it.  Nothing here imports torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["MISSING", "Reading"]

T = TypeVar("T")


@functools.lru_cache(maxsize=512)
def _steps(path: str) -> tuple[str, ...]:
    """The names of ``path``'s steps (split once per path, not once per read)."""
    return tuple(path.split("."))


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


@dataclass
class Reading:
    """The failures of one read pass (mutable on purpose: one pass, one thread)."""

    failures: dict[str, str] = field(default_factory=dict)

    def attr(self, obj: object, path: str, *, optional: bool = False) -> Any:
        """``obj.a.b.c`` or ``MISSING``; a missing step is a failure unless ``optional``."""
        current: Any = obj
        for name in _steps(path):
            try:
                # an optional step may be absent: asked with a default, no exception is built
                current = getattr(current, name, MISSING) if optional else getattr(current, name)
                if current is MISSING:
                    return MISSING
            except AttributeError as exc:
                if not optional:
                    self.fail(path, exc)
                return MISSING
            except Exception as exc:  # a property that raised
                self.fail(path, exc)
                return MISSING
        return current

    def call(self, obj: object, path: str, *args: object, optional: bool = False) -> Any:
        """``obj.a.b(*args)`` or ``MISSING``."""
        fn = self.attr(obj, path, optional=optional)
        if fn is MISSING:
            return MISSING
        try:
            return fn(*args)
        except Exception as exc:
            self.fail(path + "()", exc)
            return MISSING

    def whole(self, obj: object, path: str) -> int | None:
        """``obj.a.b`` when it is there and a Python int (not a bool), else ``None``: no failure."""
        value = self.attr(obj, path, optional=True)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def first_name(self, obj: object, *paths: str) -> str:
        """The first non-empty string at ``paths`` (a list's first item counts), else ""."""
        for path in paths:
            value = self.attr(obj, path, optional=True)
            if isinstance(value, (list, tuple)) and value:
                value = value[0]
            if isinstance(value, str) and value:
                return value
        return ""

    def int_of(self, value: Any, path: str) -> int | None:
        """A Python int from an int-like value (never a tensor read: that would sync a GPU)."""
        if value is MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                return int(value)
            except Exception as exc:
                self.fail(path, exc)
                return None
        return value

    def guard(self, label: str, fn: Callable[[], T], default: T) -> T:
        """Run ``fn``; on any exception note it under ``label`` and return ``default``."""
        try:
            return fn()
        except Exception as exc:
            self.fail(label, exc)
            return default

    def fail(self, label: str, exc: BaseException) -> None:
        self.failures.setdefault(label, f"{type(exc).__name__}: {exc}"[:200])

    def failed_under(self, prefix: str) -> tuple[str, ...]:
        return tuple(k for k in self.failures if k.startswith(prefix))

"""One method of one SGLang object replaced on the instance, and given back (guard mode only).

The class is never touched: other instances (a draft model's pools, a second scheduler in the
process) keep SGLang's own methods, and detaching deletes the instance attribute so the class's
method shows through again.  A method that is already an instance attribute (someone else's
wrapper, or SGLang's own ``functools.partial``) is left alone: ``patch`` returns ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Depth", "Patch", "patch"]

Wrapper = Callable[..., Any]


class Patch:
    """``owner.name`` replaced by ``wrapper`` on the instance."""

    def __init__(self, owner: Any, name: str, original: Wrapper, wrapper: Wrapper) -> None:
        self.owner, self.name, self.original, self.wrapper = owner, name, original, wrapper

    def undo(self) -> None:
        """Give the instance its class's method back (only if the wrapper is still the one there)."""
        if getattr(self.owner, "__dict__", {}).get(self.name) is self.wrapper:
            delattr(self.owner, self.name)


def patch(owner: Any, name: str, make: Callable[[Wrapper], Wrapper]) -> Patch | None:
    """Replace ``owner.name`` by ``make(original)`` on the instance; ``None`` when there is no such
    method, it is already an instance attribute, or the object takes no attributes."""
    original = getattr(owner, name, None) if owner is not None else None
    if not callable(original) or name in getattr(owner, "__dict__", {}):
        return None
    wrapper = make(original)
    try:
        setattr(owner, name, wrapper)
    except (AttributeError, TypeError):  # __slots__ without __dict__, a read-only proxy
        return None
    return Patch(owner, name, original, wrapper)


class Depth:
    """The calls in progress through the methods :meth:`wrap` made (true while inside one): how a
    guard tells SGLang's own freeing window from a free made elsewhere."""

    def __init__(self) -> None:
        self.calls = 0

    def __bool__(self) -> bool:
        return self.calls > 0

    def wrap(self, original: Wrapper) -> Wrapper:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            try:
                return original(*args, **kwargs)
            finally:
                self.calls -= 1

        return counted

"""Put an emulated rank's tensors on an accelerator, where SGLang keeps them.

The emulator builds and runs its ranks on the CPU (no GPU exists on the machines that run the
demo and the tests).  In SGLang the free lists, ``req_to_token``, the Mamba mapping, the tree's
values and each request's ``mamba_pool_idx`` / ``prefix_indices`` live on the GPU, and what the
probe costs there (kernel launches, host transfers, synchronisation) is not what it costs on CPU
tensors.  :func:`place_tensors` moves every tensor reachable from a rank (through emulator
objects, lists, dicts and deques) to ``device`` in place, so the probe can be measured and
checked against CUDA tensors with the same attribute names.

A placed rank is for *reading*: the emulator's own steps create new tensors on the CPU and do
not mix devices, so run the workload first, then place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, MutableMapping, MutableSequence
from typing import Any

__all__ = ["place_tensors"]

_EMULATOR = "poolwatch_emulator"


def _is_tensor(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "device") and hasattr(value, "to")


def _owned(value: object) -> bool:
    """An emulator object whose attributes are walked (not classes, functions or modules)."""
    kind = type(value)
    return (
        kind.__module__.startswith(_EMULATOR) and hasattr(value, "__dict__") and not isinstance(value, type)
    )


def place_tensors(root: object, device: str, *, convert: Callable[[Any], Any] | None = None) -> int:
    """Move every tensor reachable from ``root`` to ``device``; returns how many were moved.

    ``convert`` replaces ``tensor.to(device)`` (tests use it to see that every tensor is reached).
    Objects are visited once, so shared containers and cycles are safe; tuples and sets are
    immutable and left as they are (the emulator keeps no tensors in them).
    """
    move = convert or (lambda t: t.to(device))
    seen: set[int] = set()
    stack: list[object] = [root]
    moved = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, MutableMapping):
            moved += _place_items(obj, list(obj.items()), move, stack)
        elif isinstance(obj, (MutableSequence, deque)):
            moved += _place_items(obj, list(enumerate(obj)), move, stack)
        elif _owned(obj):
            moved += _place_items(vars(obj), list(vars(obj).items()), move, stack)
    return moved


def _place_items(
    target: Any, items: list[tuple[Any, object]], move: Callable[[Any], Any], stack: list[object]
) -> int:
    moved = 0
    for key, value in items:
        if _is_tensor(value):
            target[key] = move(value)
            moved += 1
        elif isinstance(value, (MutableMapping, MutableSequence, deque)) or _owned(value):
            stack.append(value)
    return moved

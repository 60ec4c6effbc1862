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
    import torch

    move = convert or (lambda t: t.to(device))
    seen: set[int] = set()
    stack: list[object] = [root]
    moved = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (MutableSequence, deque)):
            target: Any = obj
            items: list[tuple[Any, object]] = list(enumerate(obj))
        elif isinstance(obj, MutableMapping) or _owned(obj):
            target = obj if isinstance(obj, MutableMapping) else vars(obj)
            items = list(target.items())
        else:
            continue
        moved += _place_items(target, items, move, stack, torch.Tensor)
    return moved


def _place_items(
    target: Any,
    items: list[tuple[Any, object]],
    move: Callable[[Any], Any],
    stack: list[object],
    tensor: type,
) -> int:
    moved = 0
    for key, value in items:
        if isinstance(value, tensor):
            target[key] = move(value)
            moved += 1
        elif isinstance(value, (MutableMapping, MutableSequence, deque)) or _owned(value):
            stack.append(value)
    return moved

"""The tree counters SGLang's own checks read, counted again from the tree and the requests (the
counter witness's SGLang readings; scheduler thread, at a census).

SGLang's idle check, and the probe's cheap sample, take a pool's ``evictable`` and ``protected``
from the tree's running counters (``evictable_size_`` / ``protected_size_``, their ``full_*`` and
``mamba_*`` twins).  Each moves in step with the structure it describes:

* a radix tree's node moves its ``len(value)`` from evictable to protected when its lock count
  goes 0 -> 1 and back when it returns to 0 (``inc_lock_ref`` / ``dec_lock_ref``; ``full_lock_ref``
  and ``mamba_lock_ref`` on the hybrid trees): ``protected`` is the sum over locked nodes,
  ``evictable`` over unlocked ones -- one walk of the nodes counts both;
* a chunk cache that keeps a counter (up to 0.5.6) adds a request's ``prefix_indices`` when it
  caches the unfinished request and subtracts them when it caches the finished one: ``protected``
  is the sum of ``len(prefix_indices)`` over the requests it still holds -- the unfinished live
  ones, and the finished ones the PD decode offload manager still holds (``ongoing_offload``:
  released, by design, when their device-to-host copy completes).  From 0.5.9 a chunk cache
  counts nothing (``protected_size()`` is 0): nothing to witness.

A counter that is off from these is a counter bug (#12774's protected drift, #27666's
hand-subtracted lock), never a slot lost or freed twice: the census's ids decide that.  The unified
tree (0.5.23, whose node locks live in its tree core) is not walked here.  Cost: one Python step
per node of the tree (a census runs at a low rate), or per live request on a chunk cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.census.readings import CounterReading
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.nodes import tree_root
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.shapes import Shape

__all__ = ["full_readings", "mamba_readings", "offload_pending", "tree_lock_counts"]

_CHUNK_COUNTS_UNTIL = (0, 5, 9)  # a chunk cache's protected_size_ moves before this release only


def _len(value: Any) -> int:
    numel = getattr(value, "numel", None)
    return int(numel()) if callable(numel) else len(value)


def tree_lock_counts(tree_cache: Any, lock: str, value: str) -> tuple[int, int] | None:
    """``(evictable, protected)``: ``len`` of every node's ``value`` (device-resident: a host-only
    node's is ``None``) summed over the nodes whose ``lock`` count is 0 / above 0, the root left
    out; ``None`` when the tree's nodes do not carry ``lock`` (not this kind of tree)."""
    root = tree_root(tree_cache)
    if root is None or not hasattr(root, lock) or not hasattr(root, "children"):
        return None
    evictable = protected = 0
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        held = getattr(node, value, None)
        if held is None:
            continue
        if getattr(node, lock) > 0:
            protected += _len(held)
        else:
            evictable += _len(held)
    return evictable, protected


def offload_pending(sched: Any, reading: Reading) -> list[Any]:
    """The finished requests the PD decode offload manager still holds (their KV is being copied
    to the host; ``ongoing_offload``'s entries are ``(req, ...)`` tuples), or none."""
    pending = reading.attr(sched, "decode_offload_manager.ongoing_offload", optional=True)
    if pending is MISSING or not pending:
        return []
    out = []
    for entry in list(pending.values()):
        req = entry[0] if isinstance(entry, tuple) and entry else None
        if req is not None and hasattr(req, "prefix_indices"):
            out.append(req)
    return out


def _finished(req: Any) -> bool:
    fn = getattr(req, "finished", None)
    return bool(fn()) if callable(fn) else False


def _chunk_protected(reqs: Iterable[Any], pending: list[Any]) -> int:
    live = sum(_len(r.prefix_indices) for r in reqs if not _finished(r) and r.prefix_indices is not None)
    return live + sum(_len(r.prefix_indices) for r in pending if r.prefix_indices is not None)


def _tree(sched: Any, reading: Reading) -> Any:
    """The scheduler's tree, unless its node locks live in a tree core (0.5.23's unified tree)."""
    tree = reading.attr(sched, "tree_cache", optional=True)
    if tree is MISSING or tree is None or getattr(tree, "tree_core", None) is not None:
        return None
    return tree


def _counter(tree: Any, names: tuple[str, ...], reading: Reading) -> tuple[str, int] | None:
    for name in names:
        fn = getattr(tree, name, None)
        if callable(fn):
            value = reading.int_of(reading.call(tree, name), f"counter.{name}")
            return (f"tree_cache.{name}()", value) if value is not None else None
    return None


def full_readings(
    sched: Any, shape: Shape, live: LiveSet, reading: Reading, *, hybrid: bool
) -> tuple[CounterReading, ...]:
    """The full pool's ``evictable`` and ``protected`` counters against the census's counts."""
    tree = _tree(sched, reading)
    if tree is None:
        return ()
    if tree_root(tree) is None:  # a chunk cache: its counter moves with prefixes
        # the counter the sample reads: protected_size() alone (a hybrid chunk cache's
        # full_protected_size() is the base class's 0 on every release)
        protect = _counter(tree, ("protected_size",), reading)
        if protect is None or shape.since >= _CHUNK_COUNTS_UNTIL:
            return ()
        counted = _chunk_protected(live.holders, offload_pending(sched, reading))
        return (CounterReading(Pool.FULL, "protected", protect[0], protect[1], counted),)
    prefix = ("full_",) if hybrid else ("", "full_")
    evict = _counter(tree, tuple(f"{p}evictable_size" for p in prefix), reading)
    protect = _counter(tree, tuple(f"{p}protected_size" for p in prefix), reading)
    counts = tree_lock_counts(tree, "full_lock_ref" if hybrid else "lock_ref", "value")
    if counts is None and not hybrid:
        counts = tree_lock_counts(tree, "full_lock_ref", "value")
    if counts is None:
        return ()
    out = []
    for found, census, figure in ((evict, counts[0], "evictable"), (protect, counts[1], "protected")):
        if found is not None:
            out.append(CounterReading(Pool.FULL, figure, found[0], found[1], census))
    return tuple(out)


def mamba_readings(sched: Any, reading: Reading) -> tuple[CounterReading, ...]:
    """The Mamba pool's tree counters against a walk of the nodes' Mamba values by their lock."""
    tree = _tree(sched, reading)
    if tree is None:
        return ()
    counts = tree_lock_counts(tree, "mamba_lock_ref", "mamba_value")
    if counts is None:
        return ()
    out = []
    for name, census, figure in (
        ("mamba_evictable_size", counts[0], "evictable"),
        ("mamba_protected_size", counts[1], "protected"),
    ):
        found = _counter(tree, (name,), reading)
        if found is not None:
            out.append(CounterReading(Pool.MAMBA, figure, found[0], found[1], census))
    return tuple(out)

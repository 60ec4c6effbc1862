"""The instance methods the vLLM probe wraps beside the scheduler's hooks (EngineCore thread).

* the block pool's ``free_blocks``: the probe looks at the list (``look(blocks)``), then vLLM frees it
  -- an iterator is materialised once and passed on as a list.  The look answers ``None`` (hand
  the list on untouched: always, unless guard mode refused part of a faulty call) or the calls to
  make instead (:mod:`~poolwatch.probe.vllm.refuse`: what is left of the list, in one call or, on a
  two-pass family, in rounds; none when everything was refused);
* each single-type manager's ``pop_blocks_for_free`` (0.24+) and ``free``: before vLLM pops a
  request's list, ``popped(manager index, request id, list)`` tells the holder index, so the free
  that follows is judged against the lists as they are after the pop;
* where a KV consumer connector can refill a freed block outside the step's order
  (:mod:`~poolwatch.probe.vllm.in_flight`), the scheduler's ``schedule`` (after: the step now in
  flight) and ``update_from_output`` (before: that step is done), over the probe's own hooks.

Only instances are wrapped (an instance attribute shadows the class's method; ``unwrap`` deletes
it); a look that raises is logged at debug and never reaches vLLM.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["restore", "unwrap", "wrap_frees", "wrap_steps"]

log = logging.getLogger("poolwatch.probe")
Wrapped = tuple[object, str]
Restore = tuple[object, str, Any, Any]  # (instance, method, its own attribute before or None, the wrapper)


def _pool(scheduler: object) -> Any:
    return getattr(getattr(scheduler, "kv_cache_manager", None), "block_pool", None)


def _managers(scheduler: object) -> Sequence[Any]:
    coordinator = getattr(getattr(scheduler, "kv_cache_manager", None), "coordinator", None)
    return tuple(getattr(coordinator, "single_type_managers", ()) or ())


Look = Callable[[list[Any]], Sequence[list[Any]] | None]  # None: hand the list on as it came


def _free(original: Callable[..., Any], look: Look) -> Callable[..., Any]:
    @functools.wraps(original)
    def free_blocks(ordered_blocks: Any, *args: Any, **kwargs: Any) -> Any:
        blocks = list(ordered_blocks)  # an iterator would be spent by the look
        try:
            calls = look(blocks)
        except Exception:
            log.debug("poolwatch free tripwire failed", exc_info=True)
            calls = None
        if calls is None:
            return original(blocks, *args, **kwargs)
        result = None
        for part in calls:  # guard's answer: what is left of the list, in one call or in rounds
            result = original(part, *args, **kwargs)
        return result

    return free_blocks


Popped = Callable[[int, str, Any], None]  # (manager index, request id, its list as it is now)


def _pop(
    original: Callable[..., Any], popped: Popped, index: int, mgr: Any, inside: list[bool]
) -> Callable[..., Any]:
    """``inside``: shared by one manager's wrapped methods, so a pop made by its own wrapped ``free``
    (0.24+: ``free`` calls ``pop_blocks_for_free``) is announced once, not twice."""

    @functools.wraps(original)
    def pop(request_id: Any, *args: Any, **kwargs: Any) -> Any:
        if inside[0]:
            return original(request_id, *args, **kwargs)
        try:
            popped(index, request_id, mgr.req_to_blocks.get(request_id, ()))
        except Exception:
            log.debug("poolwatch pop look failed", exc_info=True)
        inside[0] = True
        try:
            return original(request_id, *args, **kwargs)
        finally:
            inside[0] = False

    return pop


def wrap_frees(scheduler: object, look: Look, popped: Popped) -> list[Wrapped]:
    """Wrap the pool's ``free_blocks`` and the managers' pops; what was wrapped (for :func:`unwrap`)."""
    done: list[Wrapped] = []
    pool = _pool(scheduler)
    original = getattr(pool, "free_blocks", None)
    if pool is not None and callable(original) and "free_blocks" not in vars(pool):
        pool.free_blocks = _free(original, look)
        done.append((pool, "free_blocks"))
    for index, mgr in enumerate(_managers(scheduler)):
        inside = [False]
        for name in ("pop_blocks_for_free", "free"):
            method = getattr(mgr, name, None)
            if callable(method) and name not in vars(mgr):
                setattr(mgr, name, _pop(method, popped, index, mgr, inside))
                done.append((mgr, name))
    return done


def _after(original: Callable[..., Any], seen: Callable[[Any], None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def schedule(*args: Any, **kwargs: Any) -> Any:
        output = original(*args, **kwargs)
        try:
            seen(output)
        except Exception:
            log.debug("poolwatch step look failed", exc_info=True)
        return output

    return schedule


def _before(original: Callable[..., Any], seen: Callable[..., None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def update_from_output(output: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            seen(output, *args[:1])  # the scheduler's output, and the model runner's
        except Exception:
            log.debug("poolwatch step look failed", exc_info=True)
        return original(output, *args, **kwargs)

    return update_from_output


def wrap_steps(
    scheduler: object, scheduled: Callable[[Any], None] | None, applying: Callable[..., None] | None
) -> list[Restore]:
    """Wrap the instance's ``schedule`` (``scheduled(output)`` after it) and ``update_from_output``
    (``applying(output, runner_output)`` before it, the second when given), each unless None,
    over whatever the instance has (the probe's own hooks, on the class or the instance); what to
    give back, for :func:`restore`."""
    done: list[Restore] = []
    for name, make, seen in (("schedule", _after, scheduled), ("update_from_output", _before, applying)):
        method = getattr(scheduler, name, None)
        if seen is None or not callable(method):
            continue
        wrapper = make(method, seen)
        done.append((scheduler, name, vars(scheduler).get(name), wrapper))
        setattr(scheduler, name, wrapper)
    return done


def restore(wrapped: Iterable[Restore]) -> None:
    """Undo :func:`wrap_steps`: the instance's own wrapper (the probe's hook) comes back, or the class's
    method shows through again -- only where the step wrapper is still the one there."""
    for obj, name, previous, wrapper in wrapped:
        if vars(obj).get(name) is not wrapper:
            continue
        if previous is None:
            delattr(obj, name)
        else:
            setattr(obj, name, previous)


def unwrap(wrapped: Iterable[Wrapped]) -> None:
    for obj, name in wrapped:
        if name in vars(obj):
            delattr(obj, name)

"""Freed while a rollback still needs it: a windowed manager drops blocks a rejected draft brings back
into the request's window (EngineCore thread; nothing of vLLM's is written).

A sliding-window (or chunked-local) manager frees the blocks that left the request's attention window
at every schedule (``remove_skipped_blocks``: the blocks wholly below ``get_num_skipped_tokens`` of the
count it is given, replaced by the null block).  With overlapping steps (async scheduling, pipeline
parallelism) the request's ``num_computed_tokens`` already counts the steps in flight, and with
speculative decoding those steps carry drafts the worker may reject: the frontier then rolls back by
up to the drafts in flight, and the next step attends over tokens of a block already dropped -- the
null block, or a block another request now holds.  Silent wrong output, the books balanced (vLLM
#47282: 0.25 and earlier count the drop on the optimistic count; 0.26 on the processed one,
``num_in_flight_tokens``, PR #47728).

So at each drop, before it runs: a block the call is about to drop though the lowest frontier a
rollback can leave (the request's ``num_computed_tokens`` less the drafts of the steps in flight)
still attends to it is named, with its request (``freed_in_flight``, hook ``remove_skipped_blocks``;
never a double free); a release that drops on the processed count drops nothing above that floor.
The count is vLLM's own (``get_num_skipped_tokens`` of the manager), so the rule is each window
kind's; a manager with its own drop rule (Mamba's, which already allows for the drafts, a middle-gap
window) is not wrapped.

Armed only where the hazard exists: speculative decoding and a windowed manager.  Cost per drop: one
truth test while no step is in flight (a synchronous scheduler: always); else a look-up per step in
flight and, only when drafts are in flight for the request, two calls of vLLM's own count.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from poolwatch.probe.vllm.in_flight import InFlight

__all__ = ["rolled_back", "speculative", "windowed", "wrap_drops"]

log = logging.getLogger("poolwatch.probe")
_BASE = "SingleTypeKVCacheManager"  # vLLM's manager base class: its drop is the window's head
Named = Callable[[str, tuple[int, ...]], None]  # (request, block ids) dropped while a rollback needs them


def speculative(scheduler: Any) -> bool:
    """Whether the scheduler schedules drafts (speculative decoding)."""
    spec = getattr(scheduler, "num_spec_tokens", 0)
    return isinstance(spec, int) and not isinstance(spec, bool) and spec > 0


def windowed(managers: Sequence[Any]) -> list[Any]:
    """The managers that drop a window's head by vLLM's base rule and a count of their own."""
    out = []
    for mgr in managers:
        mro = type(mgr).__mro__
        base = next((c for c in mro if c.__name__ == _BASE), None)
        if base is None or not callable(getattr(mgr, "remove_skipped_blocks", None)):
            continue
        own_drop = any("remove_skipped_blocks" in vars(c) for c in mro[: mro.index(base)])
        own_count = any("get_num_skipped_tokens" in vars(c) for c in mro[: mro.index(base)])
        if own_count and not own_drop:
            out.append(mgr)
    return out


def rolled_back(
    mgr: Any, flight: InFlight, requests: Mapping[str, Any], request_id: str, count: int
) -> tuple[int, ...]:
    """The blocks of ``request_id`` that ``mgr`` drops on ``count`` though the lowest frontier a
    rollback of the drafts in flight can leave still attends to them (empty: none)."""
    drafts = flight.drafts(request_id)
    request = requests.get(request_id) if drafts else None
    if request is None:
        return ()
    floor = max(0, int(request.num_computed_tokens) - drafts)
    if count <= floor:
        return ()
    blocks = mgr.req_to_blocks.get(request_id) or ()
    size = mgr.block_size
    drop = min(mgr.get_num_skipped_tokens(count) // size, len(blocks))
    keep = max(0, mgr.get_num_skipped_tokens(floor) // size)
    return tuple(b.block_id for b in blocks[keep:drop] if not b.is_null)


def _drop(
    original: Callable[..., Any], mgr: Any, flight: InFlight, sched: Any, named: Named
) -> Callable[..., Any]:
    @functools.wraps(original)
    def remove_skipped_blocks(*args: Any, **kwargs: Any) -> Any:
        if flight.steps:
            try:
                rid = args[0] if args else kwargs["request_id"]
                count = args[1] if len(args) > 1 else _count(kwargs)
                ids = rolled_back(mgr, flight, sched.requests, rid, count)
                if ids:
                    named(str(rid), ids)
            except Exception:
                log.debug("poolwatch window drop look failed", exc_info=True)
        return original(*args, **kwargs)

    return remove_skipped_blocks


def _count(kwargs: dict[str, Any]) -> int:
    """The count given by name (its name differs by release)."""
    for name in ("total_computed_tokens", "num_computed_tokens", "processed_computed_tokens"):
        if name in kwargs:
            return int(kwargs[name])
    raise KeyError("no token count")


def wrap_drops(
    sched: Any, managers: Sequence[Any], flight: InFlight, named: Named
) -> list[tuple[object, str]]:
    """Wrap each of ``sched``'s windowed managers' ``remove_skipped_blocks`` (instances only); what
    was wrapped."""
    done: list[tuple[object, str]] = []
    for mgr in managers:
        if "remove_skipped_blocks" not in vars(mgr):
            mgr.remove_skipped_blocks = _drop(mgr.remove_skipped_blocks, mgr, flight, sched, named)
            done.append((mgr, "remove_skipped_blocks"))
    return done

"""``clean_hicache``: a long clean run of a dense rank with HiCache on (``--enable-hierarchical-cache``,
write-through), judged as ``check_clean``'s workloads are (issue 39: no false alarm on the clean long
runs, HiCache among them).

The rank's tree is the release's own HiCache tree over its own host pool and cache controller, the
device<->host copies stood in as finished: up to 0.5.13 ``HiRadixCache`` (:mod:`rigs.sglang.hicache_tree`);
from 0.5.17 the tree the release's constructors build (:mod:`rigs.sglang.hicache_built`) --
``HiRadixCache`` on 0.5.17, from 0.5.19 ``UnifiedRadixCache`` with the host pool group and
``HybridCacheController`` its ``init_hicache`` attaches.  The traffic is ``clean_hybrid``'s busy
turns (:func:`tests.sglang_real.clean_traffic.busy`: shared prefixes, chunked prefill, aborts,
retractions) over :data:`PREFIXES` -- more shared prefixes than the device pool (:data:`KV`) keeps
-- so SGLang's own eviction writes cached prefixes back to host (the device slots freed, the host
copy kept), the host pool fills and SGLang frees the coldest host copies, and a later request whose
prefix ends on host has it loaded back (the ``PrefillAdder``'s ``init_load_back``, then
``ready_to_load_host_cache``).  Each turn starts where the release's scheduler calls
``check_hicache_events``: its prefill builder, past the early return for nothing to prefill (up to
0.5.9), or before it, every turn (from 0.5.10; 0.5.23 in ``get_next_batch_to_run``; read in the
release's own source: S14 is the 0.5.9 side of that change).
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline
from tests.sglang_real.clean_traffic import Traffic, busy, drained, started

KV = 640  # the device pool: a few prefixes and the running requests' KV, the rest evicted to host
ROWS, CONTEXT = 32, 512
PREFIXES = [[random.Random(100 + p).randrange(10, 900) for _ in range(48)] for p in range(24)]
SERVER = {"enable_hierarchical_cache": True, "hicache_write_policy": "write_through"}
COUNTED = ("write", "evict_device", "evict_host", "load")  # the controller's moves, counted


def hicache(version: str) -> tuple[Timeline, dict[str, Any]]:
    """The run on ``version``'s own classes."""
    from rigs.sglang.server_args import DENSE

    d, timeline = started(
        version, "null", kv=KV, rows=ROWS, context=CONTEXT, dense="hiradix",
        server={**SERVER, "model_path": str(DENSE)},
    )  # fmt: skip
    d.open_hicache()
    moved = counted(d.sched.tree_cache)
    traffic, turn_start = Traffic(d, PREFIXES), events(d)
    busy(d, traffic, retract=True, turn_start=turn_start)
    timeline, ran = drained(d, timeline, traffic, turn_start=turn_start)
    tree = d.sched.tree_cache
    figures = {
        "written_to_host": moved["write"],  # slots written through to host
        "evicted_to_host": moved["evict_device"],  # device slots freed, the host copy kept
        "host_evicted": moved["evict_host"],  # host copies freed (the host pool full)
        "load_backs": moved["load_ops"],
        "loaded_back": moved["load"],  # host slots given device slots again
        "host_free_end": int(_host(tree).available_size()),
    }
    return timeline, {**ran, **figures}


def _host(tree: Any) -> Any:
    """The tree's KV host pool: ``token_to_kv_pool_host``, or the unified tree's host pool group."""
    group = getattr(tree, "host_pool_group", None)
    return tree.token_to_kv_pool_host if group is None else group


def events(d: Driver) -> Any:
    """What each turn does first: ``check_hicache_events`` where the release calls it -- in its
    prefill builder (run every loop turn) before the early return for nothing to prefill from
    0.5.10, or before the builder in ``get_next_batch_to_run`` on 0.5.23, so every turn; past it up
    to 0.5.9, so only while a request waits or a chunk is in flight (read in the release's source)."""
    every = _events_before_early_return()

    def turn_start(d: Driver) -> None:
        s = d.sched
        if every or s.chunked_req is not None or s.waiting_queue:
            d.hicache_events()

    return turn_start


def _events_before_early_return() -> bool:
    """Whether the release checks HiCache's events every loop turn: in its prefill builder before
    the early return for nothing to prefill (0.5.10 on), or first thing in ``get_next_batch_to_run``
    (``_process_hicache_events``: 0.5.23)."""
    from sglang.srt.managers.scheduler import Scheduler

    if "_process_hicache_events" in inspect.getsource(Scheduler.get_next_batch_to_run):
        return True
    builder = getattr(Scheduler, "_get_new_batch_prefill_raw", None) or Scheduler.get_new_batch_prefill
    source = inspect.getsource(builder)
    events, early = source.find("check_hicache_events"), source.find("len(self.waiting_queue) == 0")
    return 0 <= events < early


def counted(tree: Any) -> Counter[str]:
    """The HiCache moves counted in slots (``*_ops``: the calls), each still the release's own
    method: the controller's ``write``, ``evict_device``, ``evict_host`` and ``load``; on the unified
    tree, which frees device and host slots itself (0.5.19 on), its ``evict`` (the device slots it
    evicted) and its host pool group's ``free`` stand for the controller's two evictions."""
    controller, group = tree.cache_controller, getattr(tree, "host_pool_group", None)
    owners: dict[str, tuple[Any, str]] = {name: (controller, name) for name in COUNTED}
    if group is not None:
        owners.update(evict_device=(tree, "evict"), evict_host=(group, "free"))
    moved: Counter[str] = Counter()
    for key, (owner, name) in owners.items():
        _count(owner, name, key, moved)
    return moved


def _count(owner: Any, name: str, key: str, moved: Counter[str]) -> None:
    original = getattr(owner, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if out is not None:
            size = getattr(out, "num_tokens_evicted", out)  # (the unified tree's EvictResult)
            moved[key] += size if isinstance(size, int) else len(size)
            moved[f"{key}_ops"] += 1
        return out

    setattr(owner, name, call)

"""``clean_hicache``: a long clean run of a dense rank with HiCache on (``--enable-hierarchical-cache``,
write-through), judged as ``check_clean``'s workloads are (issue 39: no false alarm on the clean long
runs, HiCache among them).

The rank's tree is the release's own ``HiRadixCache`` over its own host pool and cache controller,
the device<->host copies stood in as finished (:mod:`rigs.sglang.hicache_tree`).  The traffic is
``clean_hybrid``'s busy turns (:func:`tests.sglang_real.check_clean.busy`: shared prefixes, chunked
prefill, aborts, retractions) over :data:`PREFIXES` -- more shared prefixes than the device pool
(:data:`KV`) keeps -- so SGLang's own eviction writes cached prefixes back to host
(``_evict_backuped``: the device slots freed, the host copy kept), the host pool fills and SGLang's
``evict_host`` frees the coldest copies, and a later request whose prefix ends on host has it
loaded back (the ``PrefillAdder``'s ``init_load_back``, then ``ready_to_load_host_cache``).  Each
turn starts where the release's scheduler calls ``check_hicache_events``: its prefill builder, past
the early return for nothing to prefill (up to 0.5.9), or before it, every turn (from 0.5.10; read
in the builder's own source: S14 is the 0.5.9 side of that change).

0.5.23 has no ``HiRadixCache``: its HiCache is the unified tree's host pool group, which the rig
does not build (said as skipped).
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from typing import Any

from rigs.sglang.driver import Driver
from rigs.timeline import Timeline
from tests.sglang_real.check_clean import Traffic, busy, drained, started

KV = 640  # the device pool: a few prefixes and the running requests' KV, the rest evicted to host
ROWS, CONTEXT = 32, 512
PREFIXES = [[random.Random(100 + p).randrange(10, 900) for _ in range(48)] for p in range(24)]
SERVER = {"enable_hierarchical_cache": True, "hicache_write_policy": "write_through"}
COUNTED = ("write", "evict_device", "evict_host", "load")  # the controller's moves, counted


def why_not(version: str) -> str:
    """Why the rig cannot run HiCache on ``version`` ('' where it can)."""
    from rigs.sglang.releases import release

    if release(version).unified_tree:
        return (
            f"{version} has no HiRadixCache: its HiCache is UnifiedRadixCache's host pool group, "
            "which the rig does not build"
        )
    return ""


def hicache(version: str) -> tuple[Timeline, dict[str, Any]]:
    """The run (a release :func:`why_not` names no reason against)."""
    from rigs.sglang.server_args import DENSE

    d, timeline = started(
        version, "null", kv=KV, rows=ROWS, context=CONTEXT, dense="hiradix",
        server={**SERVER, "model_path": str(DENSE)},
    )  # fmt: skip
    d.open_hicache()
    moved = counted(d.sched.tree_cache.cache_controller)
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
        "host_free_end": int(tree.token_to_kv_pool_host.available_size()),
    }
    return timeline, {**ran, **figures}


def events(d: Driver) -> Any:
    """What each turn does first: ``check_hicache_events`` where the release's prefill builder
    (run every loop turn) calls it -- before its early return for nothing to prefill from 0.5.10,
    so every turn; past it up to 0.5.9, so only while a request waits or a chunk is in flight (read
    in the builder's own source)."""
    every = _events_before_early_return()

    def turn_start(d: Driver) -> None:
        s = d.sched
        if every or s.chunked_req is not None or s.waiting_queue:
            d.hicache_events()

    return turn_start


def _events_before_early_return() -> bool:
    from sglang.srt.managers.scheduler import Scheduler

    builder = getattr(Scheduler, "_get_new_batch_prefill_raw", None) or Scheduler.get_new_batch_prefill
    source = inspect.getsource(builder)
    events, early = source.find("check_hicache_events"), source.find("len(self.waiting_queue) == 0")
    return 0 <= events < early


def counted(controller: Any) -> Counter[str]:
    """The controller's writes, evictions and loads counted in slots (``load_ops``: the loads),
    each still the release's own method."""
    moved: Counter[str] = Counter()
    for name in COUNTED:
        original = getattr(controller, name)

        def call(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            out = _original(*args, **kwargs)
            if out is not None:
                moved[_name] += out if isinstance(out, int) else len(out)
                moved[f"{_name}_ops"] += 1
            return out

        setattr(controller, name, call)
    return moved

"""The HiCache host pool (``--enable-hierarchical-cache``): its account at a loop boundary.

SGLang keeps a second tier of KV slots in host memory (``HostKVCache`` and its MHA/MLA/NSA
subclasses, ``tree_cache.token_to_kv_pool_host``) and checks no conservation on it.  poolwatch
counts it as one more pool, ``host``, with the same equation as the device pools::

    size == available + evictable + protected + held

``available``  the host pool's free list (``available_size()``: ``len(free_slots)``);
``evictable``  host slots on prefix-tree nodes (``node.host_value``) with no host lock;
``protected``  host slots on nodes whose host lock (``host_ref_counter``) is taken (a prefetch
               from, or a backup to, an L3 storage backend is using them);
``held``       host slots *in flight*: owned by the cache controller's operations and on no node.

What is in flight, release by release (read in 0.5.4.post1 and 0.5.9's ``hiradix_cache.py`` and
``managers/cache_controller.py``; 0.5.15's ``write_backup`` still sets ``host_value`` when queued):

* a **write-through** allocates host slots and puts them on ``node.host_value`` at once, before the
  copy runs (``ongoing_write_through`` only keeps the node locked on the device until the ack), so
  its slots are already counted on the tree;
* a **load-back** reads host slots the tree keeps (``ongoing_load_back``) and allocates none;
* so with no storage backend nothing else holds a host slot, ``held`` is 0 and the account is
  exact: every host alloc and free runs in the scheduler thread, where this reads;
* with an **L3 storage backend** (``enable_storage``) a prefetch allocates host slots before the
  tree has them (``ongoing_prefetch``), and the controller's storage threads shrink the operation's
  slots and queue the rest on ``host_mem_release_queue`` *outside* the scheduler thread; a slot can
  be in neither place for a moment.  No count of what is in flight is exact then, so only
  ``size`` and ``available`` are reported (a coarse account) and the cached and in-flight terms
  are ``None`` (named in ``unreadable``): the gap is unknown, and no idle residual can be
  inferred from them either (host locks and prefetches outlive SGLang's idle moments on releases
  before 0.5.12).

0.5.23 replaced ``HiRadixCache`` with ``UnifiedRadixCache``: one host pool per component (KV,
Mamba, SWA, indexer, ...) behind ``tree_cache.host_pool_group`` (``HostPoolGroup.entry_map``, keyed
by ``PoolName``), the tree's host copies per component, optionally in a Rust tree core.  There
``host`` is the group's ``kv`` entry only (the KV slots, as on older releases), read coarsely: its
``logical_size`` (the slots the tree indexes; ``size`` is physical when decode context parallelism
shares a row) and ``available_size()`` (free list plus the lazily merged ``release_slots``), with
the cached and in-flight terms ``None``.  The other components' host pools are not exported
(``docs/engines/sglang.md``, "HiCache host pool").

Cost: ``len()`` of the free list plus one walk of the tree (one attribute read per node, no
tensor contents, no GPU synchronisation: host indices live in host memory), one tree level at a
time at C speed: 0.4 ms for 1,000 nodes, 23 ms for 10,000, 226 ms for 100,000 on a loaded 2-core
VM (``benchmarks/bench_host_walk.py``; a per-node Python loop took 3-5 times as long).  That is
too much for every sample of a large tree, so :class:`HostReader` spends at most ``budget`` (1 %)
of the scheduler thread on it: after a walk that took ``t`` seconds the next one waits
``t / budget`` seconds, and the samples in between carry the last account (exact at the loop
boundary it was read at; the host pool's gap does not depend on the device pools').  At those
figures a 1,000-node tree is read about every 0.1 s sample and a 100,000-node one every 20 s.
Only a walk is budgeted: a coarse account (0.5.23, a storage backend) walks nothing and is read at
every sample.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Callable
from typing import Any

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.nodes import tree_root

__all__ = [
    "HostReader",
    "HostTree",
    "host_account",
    "host_pool_of",
    "unified_host_account",
    "unified_kv_host_pool_of",
    "walk_host_values",
]


_HOST = operator.attrgetter("host_value")
_REF = operator.attrgetter("host_ref_counter")
_CHILDREN = operator.attrgetter("children")
_VALUES = operator.methodcaller("values")
_SHAPE = operator.attrgetter("shape")
_FIRST = operator.itemgetter(0)
_NONE = itertools.repeat(None)
_ZERO = itertools.repeat(0)


class HostTree:
    """The tree's host slots: ``(evictable, protected)`` and how many nodes carry one."""

    __slots__ = ("evictable", "nodes", "protected")

    def __init__(self) -> None:
        self.evictable = 0
        self.protected = 0
        self.nodes = 0


def host_pool_of(sched: Any, reading: Reading) -> Any:
    """The HiCache host pool of ``sched``'s tree, or ``None`` (no HiCache, or 0.5.23's unified tree)."""
    tree = reading.attr(sched, "tree_cache", optional=True)
    if tree is MISSING or tree is None:
        return None
    if reading.attr(tree, "host_pool_group", optional=True) is not MISSING:
        return None  # 0.5.23's UnifiedRadixCache: :func:`unified_kv_host_pool_of`
    host = reading.attr(tree, "token_to_kv_pool_host", optional=True)
    if host is MISSING or host is None or tree_root(tree) is None:
        return None
    return host


def unified_kv_host_pool_of(sched: Any, reading: Reading) -> Any:
    """0.5.23's KV host pool (``tree_cache.host_pool_group``'s ``kv`` entry), or ``None``."""
    tree = reading.attr(sched, "tree_cache", optional=True)
    if tree is MISSING or tree is None:
        return None
    group = reading.attr(tree, "host_pool_group", optional=True)
    entries = None if group is MISSING or group is None else reading.attr(group, "entry_map", optional=True)
    if not isinstance(entries, dict):
        return None
    for name, entry in entries.items():
        # ``PoolName`` is a ``str`` enum whose hash is its member name's: match by value, not by key
        if getattr(name, "value", name) == "kv":
            pool = reading.attr(entry, "host_pool", optional=True)
            return None if pool is MISSING else pool
    return None


def unified_host_account(sched: Any, reading: Reading) -> PoolAccount | None:
    """The coarse ``host`` account of 0.5.23's KV host pool, or ``None`` when there is none."""
    host = unified_kv_host_pool_of(sched, reading)
    if host is None:
        return None
    logical = reading.attr(host, "logical_size", optional=True)
    size = reading.int_of(reading.attr(host, "size") if logical is MISSING else logical, "host.size")
    available = reading.int_of(reading.call(host, "available_size"), "host.available")
    unreadable = [name for name, value in (("size", size), ("available", available)) if value is None]
    return PoolAccount(
        pool=Pool.HOST,
        size=size,
        available=available,
        evictable=None,
        protected=None,
        held=None,
        session_held=0,
        exactness=Exactness.COARSE,
        unreadable=(*unreadable, "evictable", "protected", "held"),
    )


def _sizes(hosts: list[Any]) -> list[int]:
    """Lengths of host-index tensors read from their shapes (C speed: ``Tensor.__len__`` is a
    Python-level call); anything without a shape (the root's list) by ``len``."""
    try:
        return list(map(_FIRST, map(_SHAPE, hosts)))
    except (AttributeError, IndexError, TypeError):
        return list(map(len, hosts))


def walk_host_values(root: Any) -> HostTree:
    """Sum the host copies' lengths over the tree under ``root``, split by the host lock.

    One level at a time with ``map``/``itertools`` (no Python frame per node).  The root's
    ``host_value`` is an empty list in SGLang; a node without a host copy has ``None``."""
    out = HostTree()
    level = [root]
    while level:
        hosts = list(map(_HOST, level))
        backed = list(map(operator.is_not, hosts, _NONE))
        if any(backed):
            sizes = _sizes(list(itertools.compress(hosts, backed)))
            refs = map(_REF, itertools.compress(level, backed))
            locked = sum(itertools.compress(sizes, map(operator.gt, refs, _ZERO)))
            out.protected += locked
            out.evictable += sum(sizes) - locked
            out.nodes += len(sizes) - sizes.count(0)
        level = list(itertools.chain.from_iterable(map(_VALUES, map(_CHILDREN, level))))
    return out


def _storage_attached(tree: Any, reading: Reading) -> bool:
    if bool(reading.attr(tree, "enable_storage", optional=True)):
        return True
    prefetch = reading.attr(tree, "ongoing_prefetch", optional=True)
    return bool(prefetch)  # MISSING and an empty dict are both false


def host_account(sched: Any, reading: Reading) -> PoolAccount | None:
    """The ``host`` pool's account, or ``None`` when ``sched`` has no HiCache host pool."""
    host = host_pool_of(sched, reading)
    if host is None:
        return unified_host_account(sched, reading)
    tree = sched.tree_cache
    unreadable: list[str] = []
    size = reading.int_of(reading.attr(host, "size"), "host.size")
    available = reading.int_of(reading.call(host, "available_size"), "host.available")
    storage = _storage_attached(tree, reading)
    walked = None if storage else reading.guard("host.tree", lambda: walk_host_values(tree.root_node), None)
    held: int | None = None if storage else 0
    for name, value in (("size", size), ("available", available), ("held", held)):
        if value is None:
            unreadable.append(name)
    if walked is None:
        unreadable.extend(("evictable", "protected"))
    return PoolAccount(
        pool=Pool.HOST,
        size=size,
        available=available,
        evictable=walked.evictable if walked is not None else None,
        protected=walked.protected if walked is not None else None,
        held=held,
        session_held=0,
        exactness=Exactness.COARSE if storage else Exactness.EXACT,  # poolwatch_pool_figures_exact
        unreadable=tuple(unreadable),
    )


class HostReader:
    """:func:`host_account`, with the tree walk budgeted: an exact account (one that walked the
    tree) is carried until its walk's cost fits the budget again; an account that walks nothing
    (0.5.23's unified pools, a storage backend's coarse one) is read at every sample, so
    back-to-back samples show the host pool's free count as SGLang has it after each alloc or free."""

    __slots__ = ("_budget", "_clock", "_due", "_last")

    def __init__(self, budget: float = 0.01, clock: Callable[[], float] = time.perf_counter) -> None:
        self._budget, self._clock = budget, clock
        self._last: PoolAccount | None = None
        self._due = 0.0

    def read(self, sched: Any, reading: Reading) -> PoolAccount | None:
        """The host account: read now, or the last walked one while its walk's budget lasts."""
        now = self._clock()
        if self._last is not None and now < self._due:
            return self._last
        account = host_account(sched, reading)
        walked = account is not None and account.exactness is Exactness.EXACT
        self._last = account if walked else None
        self._due = now + (self._clock() - now) / self._budget if walked else now
        return account

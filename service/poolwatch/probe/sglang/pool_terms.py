"""Per-pool readers: every term of ``size == available + evictable + protected + held + session``.

The terms come from the same accessors SGLang's own checks use (reference §1.2-§1.3), chosen by
the release family (:mod:`poolwatch.probe.sglang.shapes`) and by what the scheduler object has.  A term
that cannot be read is ``None`` and named in ``PoolAccount.unreadable``; the rest still count.
All reads are Python ints or ``len()`` of free lists: no GPU synchronisation.

Kept whole: one reader per pool, every term of the one equation, read through the same accessors
SGLang's checks use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.footprint import Holdings
from poolwatch.probe.sglang.nodes import TreeRoot
from poolwatch.probe.sglang.shapes import Shape

__all__ = ["PoolKinds", "checkpoint_pool", "pool_kinds", "read_pools"]

_FIELDS = ("size", "available", "evictable", "protected", "held", "session_held")
Thunk = Callable[[], Any]


class PoolKinds:
    """Which pools this rank has (a hybrid SWA model, a hybrid SSM/Mamba model, or neither)."""

    def __init__(self, swa: bool, ssm: bool) -> None:
        self.swa = swa
        self.ssm = ssm


def pool_kinds(sched: Any, shape: Shape, reading: Reading) -> PoolKinds:
    swa_flag, ssm_flag = shape.hybrid_flags
    swa = bool(reading.attr(sched, swa_flag, optional=True))
    ssm = bool(reading.attr(sched, ssm_flag, optional=True))
    if not ssm:  # a Mamba pool is there whatever the flag is called
        ssm = reading.attr(sched, "req_to_token_pool.mamba_pool", optional=True) not in (MISSING, None)
    return PoolKinds(swa, ssm)


def _account(pool: Pool, reading: Reading, thunks: dict[str, Thunk | int | None]) -> PoolAccount:
    figures: dict[str, int | None] = {}
    unreadable: list[str] = []
    for name in _FIELDS:
        thunk = thunks.get(name)
        value = thunk() if callable(thunk) else thunk
        if type(value) is not int:  # the label is built only when the value needs converting
            value = reading.int_of(value, f"{pool.value}.{name}")
            if value is None:
                unreadable.append(name)
        figures[name] = value
    return PoolAccount(pool=pool, exactness=Exactness.EXACT, unreadable=tuple(unreadable), **figures)


def _first(reading: Reading, obj: object, paths: tuple[str, ...]) -> Any:
    """The result of the first of ``paths`` (methods) that exists; a failure if none does."""
    for path in paths:
        if reading.attr(obj, path, optional=True) is not MISSING:
            return reading.call(obj, path)
    reading.fail(paths[0], AttributeError(f"none of {', '.join(paths)}"))
    return MISSING


def _stats(sched: Any, reading: Reading) -> Any:
    """SGLang's own ``PoolStats`` (0.5.15+), the authority on byte-derived capacities."""
    if reading.attr(sched, "pool_stats_observer", optional=True) is MISSING:
        return None
    stats = reading.call(sched, "pool_stats_observer.get_pool_stats")
    # the byte-derived capacities came later than PoolStats itself (0.5.20's has none): the
    # allocators' own figures then, as on the releases before it
    return None if stats is MISSING or not hasattr(stats, "full_capacity") else stats


def _capacity(stated: Any, own: Thunk) -> Any:
    """``PoolStats``' byte-derived capacity where the release states it; where it leaves it
    ``None`` (0.5.21 states it for SWA models only), the figure its usage divides by: the
    scheduler's or allocator's, as on the releases whose ``PoolStats`` has no such field."""
    return own() if stated is None else stated


def _session_figure(sched: Any, reading: Reading, paths: tuple[str, ...], own: int | None) -> Any:
    """SGLang's own session-held figure; where the release keeps none for this pool (0.5.10 counts
    no session-held Mamba slot, #23496), ``own``: the probe's count of the parked session slots."""
    for path in paths:
        if reading.attr(sched, path, optional=True) is not MISSING:
            return reading.call(sched, path)
    if own is not None:
        return own
    tree = reading.attr(sched, "tree_cache", optional=True)
    if not any(name.startswith("session") for name in dir(tree)):
        return 0  # no session machinery anywhere (an emulator, a build without sessions)
    reading.fail(paths[0], AttributeError(f"none of {', '.join(paths)}"))
    return MISSING


def _session(
    sched: Any, reading: Reading, shape: Shape, paths: tuple[str, ...], own: int | None = None
) -> Thunk | int:
    if not shape.has_session_held:
        return 0
    return lambda: _session_figure(sched, reading, paths, own)


def _full(
    sched: Any,
    kinds: PoolKinds,
    shape: Shape,
    reading: Reading,
    held: Holdings,
    stats: Any,
    root: TreeRoot | None = None,
) -> PoolAccount:
    alloc = "token_to_kv_pool_allocator"
    hybrid = kinds.swa or kinds.ssm
    if kinds.swa:
        own_size: Thunk = lambda: reading.attr(sched, "full_tokens_per_layer")  # noqa: E731
    elif kinds.ssm:
        own_size = lambda: reading.attr(sched, f"{alloc}.size")  # noqa: E731
    else:
        own_size = lambda: reading.attr(sched, "max_total_num_tokens")  # noqa: E731
    if stats is not None:
        size: Thunk = lambda: _capacity(stats.full_capacity, own_size)  # noqa: E731
        available: Thunk = lambda: stats.full_available_size  # noqa: E731
        evictable: Thunk = lambda: stats.full_evictable_size  # noqa: E731
    else:
        size = own_size
        avail_path = f"{alloc}.full_available_size" if kinds.swa else f"{alloc}.available_size"
        available = lambda: reading.call(sched, avail_path)  # noqa: E731
        evict_paths = (
            ("tree_cache.full_evictable_size", "tree_cache.evictable_size")
            if hybrid
            else ("tree_cache.evictable_size",)
        )
        evictable = lambda: _first(reading, sched, evict_paths)  # noqa: E731
    # a ChunkCache (PD decode, no tree) keeps its protected count in protected_size() alone: 0.5.4's
    # counts the prebuilt requests' KV there, and its full_protected_size() is the base class's 0
    # (0.5.23's unified tree raises NotImplementedError on root_node: a Rust core holds its nodes)
    tree = (root or TreeRoot()).found(sched, reading)
    prot_paths = (
        ("tree_cache.full_protected_size", "tree_cache.protected_size")
        if hybrid and tree
        else ("tree_cache.protected_size",)
    )
    own = "_session_held_full_tokens" if kinds.swa else "_session_held_tokens"
    sess_paths = ("pool_stats_observer.session_held_tokens", own)
    return _account(
        Pool.FULL,
        reading,
        {
            "size": size,
            "available": available,
            "evictable": evictable,
            "protected": lambda: _first(reading, sched, prot_paths),
            "held": held.full,
            "session_held": _session(sched, reading, shape, sess_paths),
        },
    )


def _swa(sched: Any, shape: Shape, reading: Reading, held: Holdings, stats: Any) -> PoolAccount:
    idle_held = 0 if held.live == 0 else held.swa  # busy: from the requests' window frontiers
    own_size: Thunk = lambda: reading.attr(sched, "swa_tokens_per_layer")  # noqa: E731
    return _account(
        Pool.SWA,
        reading,
        {
            "size": (lambda: _capacity(stats.swa_capacity, own_size)) if stats is not None else own_size,
            "available": (lambda: stats.swa_available_size)
            if stats is not None
            else (lambda: reading.call(sched, "token_to_kv_pool_allocator.swa_available_size")),
            "evictable": lambda: reading.call(sched, "tree_cache.swa_evictable_size"),
            "protected": lambda: reading.call(sched, "tree_cache.swa_protected_size"),
            "held": idle_held,
            "session_held": _session(
                sched,
                reading,
                shape,
                ("pool_stats_observer.session_held_swa_tokens", "_session_held_swa_tokens"),
            ),
        },
    )


def _tree_or_zero(sched: Any, reading: Reading, path: str) -> Any:
    if reading.attr(sched, path, optional=True) is MISSING:
        return 0  # a chunk cache (PD decode) keeps no Mamba states
    return reading.call(sched, path)


def checkpoint_pool(sched: Any, reading: Reading) -> Any:
    """``req_to_token_pool.mamba_ckpt_pool`` (int8 Mamba checkpoints, 0.5.17+), or ``None``."""
    ckpt = reading.attr(sched, "req_to_token_pool.mamba_ckpt_pool", optional=True)
    return None if ckpt is MISSING else ckpt


def _mamba(sched: Any, shape: Shape, reading: Reading, held: Holdings, ckpt: Any = None) -> PoolAccount:
    """The active Mamba pool.  With int8 checkpoints the tree's states live in the checkpoint pool,
    so (as SGLang's ``mamba-active`` check) the tree owns none of these slots."""
    owner = "req_to_token_pool.mamba_allocator" if shape.mamba_allocator else "req_to_token_pool.mamba_pool"
    tree = ckpt is None
    return _account(
        Pool.MAMBA,
        reading,
        {
            "size": lambda: reading.attr(sched, "req_to_token_pool.mamba_pool.size"),
            "available": lambda: reading.call(sched, f"{owner}.available_size"),
            "evictable": (lambda: _tree_or_zero(sched, reading, "tree_cache.mamba_evictable_size"))
            if tree
            else 0,
            "protected": (lambda: _tree_or_zero(sched, reading, "tree_cache.mamba_protected_size"))
            if tree
            else 0,
            "held": held.mamba,
            "session_held": _session(
                sched,
                reading,
                shape,
                ("pool_stats_observer.session_held_mamba_slots", "_session_held_mamba_slots"),
                held.session_mamba,
            ),
        },
    )


def _mamba_checkpoints(sched: Any, reading: Reading, ckpt: Any) -> PoolAccount:
    """The int8 checkpoint pool as SGLang's ``mamba-int8`` check reads it: its free count, and the
    tree's Mamba evictable and protected counts, against ``num_slots``; no request holds one."""
    return _account(
        Pool.MAMBA_CKPT,
        reading,
        {
            "size": lambda: reading.attr(ckpt, "num_slots"),
            "available": lambda: reading.call(ckpt, "available_size"),
            "evictable": lambda: _tree_or_zero(sched, reading, "tree_cache.mamba_evictable_size"),
            "protected": lambda: _tree_or_zero(sched, reading, "tree_cache.mamba_protected_size"),
            "held": 0,
            "session_held": 0,
        },
    )


def _req_size(sched: Any, reading: Reading, role: str, shape: Shape) -> int | None:
    size = reading.int_of(reading.attr(sched, "req_to_token_pool.size"), "req.size")
    pre = reading.int_of(
        reading.attr(sched, "req_to_token_pool.pre_alloc_size", optional=True), "req.pre_alloc"
    )
    if size is None:
        return None
    counts_pre = role == "decode" or shape.held_rule.value == "req_kv"
    return size + (pre or 0) if counts_pre else size


def _req(sched: Any, shape: Shape, reading: Reading, held: Holdings, role: str) -> PoolAccount:
    return _account(
        Pool.REQ,
        reading,
        {
            "size": lambda: _req_size(sched, reading, role, shape),
            "available": lambda: reading.guard(
                "req.available", lambda: len(sched.req_to_token_pool.free_slots), None
            ),
            "evictable": 0,
            "protected": 0,
            "held": held.rows,
            "session_held": _session(
                sched,
                reading,
                shape,
                ("pool_stats_observer.session_held_req_count", "_session_held_req_count"),
            ),
        },
    )


def read_pools(
    sched: Any,
    shape: Shape,
    reading: Reading,
    held: Holdings,
    role: str,
    kinds: PoolKinds | None = None,
    root: TreeRoot | None = None,
) -> dict[Pool, PoolAccount]:
    """One exact account per pool this rank has (``kinds``: already read in this pass; ``root``:
    whether the tree has a root node, kept from one sample to the next)."""
    kinds = pool_kinds(sched, shape, reading) if kinds is None else kinds
    stats = _stats(sched, reading)
    pools = {Pool.FULL: _full(sched, kinds, shape, reading, held, stats, root)}
    if kinds.swa:
        pools[Pool.SWA] = _swa(sched, shape, reading, held, stats)
    if kinds.ssm:
        ckpt = checkpoint_pool(sched, reading)
        pools[Pool.MAMBA] = _mamba(sched, shape, reading, held, ckpt)
        if ckpt is not None:
            pools[Pool.MAMBA_CKPT] = _mamba_checkpoints(sched, reading, ckpt)
    pools[Pool.REQ] = _req(sched, shape, reading, held, role)
    return pools

"""The tree proof's index: which Mamba (or int8 checkpoint) slots the tree held at the last census.

Taken at a Mamba census (a loop boundary); a free is refused on it only when the tree *still*
holds the slot at the free, read two ways as the family keeps its tree
(:attr:`~poolwatch.probe.sglang.guard.paths.MambaPaths.tree`):

* ``node`` (``MambaRadixCache`` up to 0.5.12): one walk of the nodes, ``{slot: (node, the node's
  mamba_value tensor)}``; at a free the node must still hold that very tensor (one attribute read).
  Eviction there frees ``node.mamba_value`` itself before deleting the node, which the caller lets
  through by identity.
* ``flat`` (0.5.23's ``UnifiedRadixCache``, Python or Rust tree core): the tree's own
  ``all_mamba_values_flatten()``, ``{slot: None}``; a free naming an indexed slot reads it again
  (once per such free) and refuses the ids still in it.  The unified tree clears a node's Mamba
  value before an eviction frees it, so a slot it still lists is never being evicted.

Between censuses the index is kept incrementally (:class:`TreeHooks`, on the tree instance): an
insertion hands over the value the tree took (the insert's Mamba value unless it reports
``mamba_exist``; on 0.5.23 an int8 checkpoint slot when the checkpoint pool holds the tree's
states), kept unread and indexed before the next free consults the index; a HiCache load-back
(``init_load_back``, ``flat`` trees: its device slots are given to the nodes without an
insertion) re-reads the tree's values, so a loaded-back slot is indexed at once (and forgotten as
any other when the tree evicts it again, through its own frees).
``flat``: the tree's own frees (the Mamba component's ``_free_mamba_value``: evictions, path
caps, unused insert values) forget the ids they free and pass unchecked, so an eviction costs
no re-read.  ``node``: the entry is ``(None, the inserted tensor)`` until the next census finds
its node; the tree frees that very tensor when it evicts it (let through, forgotten), and any
other free of its ids is refused.  So a free of a slot the tree took *since the last census* is
refused at the free.

Cost: O(nodes) and one host read per census; per free a dict lookup per freed id, plus, on 0.5.23
only for a free of an indexed id outside the tree's own frees (a wrong free), one re-read; per
insertion nothing read: the value taken is kept, and read at the next free that consults the index
(:meth:`SlotGuard.read <poolwatch.probe.sglang.guard.slots.SlotGuard.read>`; at most
:data:`~poolwatch.probe.sglang.guard.slots.MAX_UNREAD` wait), or dropped unread at the census.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from poolwatch.probe.sglang.guard.patch import Depth, Patch, patch
from poolwatch.probe.sglang.guard.takes import Takes

__all__ = ["Owned", "TreeHooks", "current_values", "node_index", "value_ids", "values_index"]

log = logging.getLogger("poolwatch.probe")
Owned = dict[int, tuple[Any, Any] | None]  # slot -> (node, its value tensor) ("node"), or None ("flat")


def value_ids(tensors: list[Any]) -> list[int]:
    """The ids the tensors hold, flattened, in one host read: one tensor (an insertion's value) is
    read as it is -- every other tensor operation costs several µs cold --, many (a census's
    nodes) joined first."""
    if len(tensors) == 1:
        out: list[int] = []
        _flatten(tensors[0].tolist(), out)
        return out
    import torch

    if not tensors:
        return []
    return [int(i) for i in torch.cat([t.reshape(-1).to(torch.int64) for t in tensors]).tolist()]


def _flatten(value: Any, out: list[int]) -> None:
    if isinstance(value, list):
        if value and not isinstance(value[0], list):
            out += map(int, value)
            return
        for part in value:
            _flatten(part, out)
    else:
        out.append(int(value))


def node_index(tree_cache: Any) -> Owned:
    """``{slot: (node, node.mamba_value)}`` over a ``MambaRadixCache`` (one walk, one host read)."""
    try:
        root = tree_cache.root_node
        pairs: list[tuple[Any, Any]] = []
        stack = [root]
        while stack:
            node = stack.pop()
            value = getattr(node, "mamba_value", None)
            if value is not None and node is not root:
                pairs.append((node, value))
            stack.extend(node.children.values())
        ids = value_ids([v for _, v in pairs])
    except Exception:  # no walkable tree: no proof
        log.debug("poolwatch guard: tree index unreadable", exc_info=True)
        return {}
    out: Owned = {}
    at = 0
    for pair in pairs:
        n = int(pair[1].numel())
        for slot in ids[at : at + n]:
            out[slot] = pair
        at += n
    return out


def current_values(tree_cache: Any) -> Callable[[], set[int]] | None:
    """The tree's Mamba values now, as SGLang flattens them (``None``: the tree has no such helper)."""
    flatten = getattr(tree_cache, "all_mamba_values_flatten", None)
    if not callable(flatten):
        return None
    return lambda: set(value_ids([flatten()]))


def values_index(values: Callable[[], set[int]]) -> Owned:
    """``{slot: None}`` for every Mamba value the tree holds now."""
    try:
        return dict.fromkeys(values())
    except Exception:
        log.debug("poolwatch guard: tree values unreadable", exc_info=True)
        return {}


def _inserted(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    """The Mamba value an insertion gave the tree, or ``None``: ``insert(params)`` from 0.5.9
    (``InsertResult.mamba_exist``), ``insert(key, value, mamba_value)`` before (``(len, exist)``)."""
    params = args[0] if args else kwargs.get("params")
    value = getattr(params, "mamba_value", None)
    if value is None:
        value = args[2] if len(args) > 2 else kwargs.get("mamba_value")
    legacy = isinstance(result, tuple) and len(result) > 1
    exist = result[1] if legacy else getattr(result, "mamba_exist", False)
    return None if not hasattr(value, "reshape") or exist else value  # a tensor, not another flag


class TreeHooks:
    """The tree's insertions and (0.5.23) own frees, seen on the instance (guard mode only).

    ``took(value, checkpoint)`` is told the tensor each insertion gave the tree (unread: the
    guard reads it when a free first needs it); :attr:`freeing` is true while the unified tree
    frees its own values (the Mamba component's ``_free_mamba_value``).  Up to 0.5.12 the tree
    frees a node's own value tensor, by identity, which
    :class:`~poolwatch.probe.sglang.guard.slots.SlotGuard` tells apart.
    ``takes``: the KV columns each insertion of a request keeps of its row
    (:mod:`~poolwatch.probe.sglang.guard.takes`; the tree's ``cache_*_req`` wrapped too)."""

    def __init__(
        self,
        tree_cache: Any,
        took: Callable[[Any, bool], None],
        loaded: Callable[[], None] | None = None,
        takes: Takes | None = None,
    ) -> None:
        self.tree, self.took, self.loaded, self.takes = tree_cache, took, loaded, takes
        self.freeing = Depth()
        self.patches: list[Patch] = []

    def install(self) -> bool:
        components = getattr(self.tree, "components", None)
        owners = list(components.values()) if isinstance(components, dict) else []
        loads = ((self.tree, "init_load_back", self._load_back),) if self.loaded is not None else ()
        names = ("cache_unfinished_req", "cache_finished_req") if self.takes is not None else ()
        caches = tuple((self.tree, name, self.takes.cache) for name in names if self.takes is not None)
        for owner, name, make in (
            (self.tree, "insert", self._insert),
            *loads,
            *caches,
            *((c, "_free_mamba_value", self.freeing.wrap) for c in owners if hasattr(c, "_free_mamba_value")),
        ):
            done = patch(owner, name, make)
            if done is not None:
                self.patches.append(done)
        return bool(self.patches)

    def uninstall(self) -> None:
        for done in self.patches:
            done.undo()
        self.patches = []

    def _load_back(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``init_load_back`` (0.5.23 HiCache, its buffer pipeline and external linker): the states
        it loads from host are given to the tree's nodes without an insertion -- indexed at once
        (``loaded``: the tree's values read again), not at the next census."""

        def init_load_back(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                if self.loaded is not None:
                    self.loaded()
            except Exception:  # never in SGLang's way: the next census re-reads the tree
                log.debug("poolwatch guard: load-back unreadable", exc_info=True)
            return result

        return init_load_back

    def _insert(self, original: Callable[..., Any]) -> Callable[..., Any]:
        takes = self.takes

        def insert(*args: Any, **kwargs: Any) -> Any:
            if takes is None:
                result = original(*args, **kwargs)
            else:
                params = args[0] if args else kwargs.get("params")
                takes.begin(params)
                result = None
                try:
                    result = original(*args, **kwargs)
                finally:
                    takes.end(params, result)
            try:
                value = _inserted(args, kwargs, result)
                if value is not None:
                    pool = getattr(self.tree, "req_to_token_pool", None)
                    self.took(value, getattr(pool, "mamba_ckpt_pool", None) is not None)
            except Exception:  # never in SGLang's way: the next census re-reads the tree
                log.debug("poolwatch guard: tree insertion unreadable", exc_info=True)
            return result

        return insert

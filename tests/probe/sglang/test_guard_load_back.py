"""Guard on 0.5.23's HiCache load-back: the device slots ``init_load_back`` gives the tree's nodes
(without an insertion) are indexed at once, so a stale free of one while the tree holds it is
refused before any census, and the tree's own eviction of it later goes through."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from rigs.fakes.sglang import SlotAllocator


class _Pool0523:
    """0.5.23's request pool as guard's Mamba paths see it."""

    def __init__(self) -> None:
        self.mamba_allocator = SlotAllocator(8)
        self.mamba_pool = SimpleNamespace(free=None)  # 0.5.23's MambaPool holds states only


class _Mamba:
    """The unified tree's Mamba component: its own frees of the tree's values."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def _free_mamba_value(self, value: torch.Tensor) -> None:
        self.pool.mamba_allocator.free(value)


class _HiTree:
    """A unified tree with HiCache: its own flattened Mamba values; ``init_load_back`` allocates
    device Mamba slots for the states it loads from host and hangs them on the nodes (no
    ``insert``); eviction tombstones a node's value, then frees it through the component."""

    def __init__(self, pool: Any) -> None:
        self.values: list[torch.Tensor] = []
        self.pool = pool
        self.components = {"mamba": _Mamba(pool)}

    def insert(self, params: Any) -> Any:
        return SimpleNamespace(prefix_len=0, mamba_exist=False)

    def init_load_back(self, params: Any) -> tuple[int, Any]:
        self.values.append(self.pool.mamba_allocator.alloc(1))
        return 0, params.best_match_node

    def evict(self) -> None:
        value = self.values.pop(0)
        self.components["mamba"]._free_mamba_value(value)

    def all_mamba_values_flatten(self) -> torch.Tensor:
        return torch.cat(self.values) if self.values else torch.empty((0,), dtype=torch.int64)


def test_a_loaded_back_slot_is_the_trees_at_once_and_its_eviction_goes_through() -> None:
    pool = _Pool0523()
    tree = _HiTree(pool)
    seen: list[Any] = []
    sched = SimpleNamespace(req_to_token_pool=pool, chunked_req=None, tree_cache=tree)
    refuser = FreeRefuser(sched, lambda _pool, *a: seen.append(a[:3]), paths=GUARD_PATHS["0.5.23"])
    assert refuser.install()
    refuser.refresh()  # the last census: the tree holds nothing on the device
    assert refuser.mamba is not None
    assert refuser.mamba.tree == {}
    tree.init_load_back(SimpleNamespace(best_match_node=7))  # a request's host hit, loaded back
    slot = int(tree.values[0][0])
    pool.mamba_allocator.free(tree.values[0].clone())  # a stale pointer's free, no census since
    assert slot not in pool.mamba_allocator.free_slots.tolist()
    assert seen == [((slot,), ("tree",), "mamba_allocator.free")]
    tree.evict()  # the tree's own free of the loaded-back slot: passes, and is forgotten
    assert slot in pool.mamba_allocator.free_slots.tolist()
    assert slot not in refuser.mamba.tree
    assert len(seen) == 1
    refuser.uninstall()
    assert "init_load_back" not in vars(tree)

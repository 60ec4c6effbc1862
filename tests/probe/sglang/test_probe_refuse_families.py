"""Guard v2 per release family, on the emulator's pools in each family's shape (0.5.5.post3/0.5.6:
the 0.5.4 row free; 0.5.10/0.5.12: ``free(req)`` + ``free_mamba_cache(req)``, ids 1..size) and on a
stand-in of 0.5.23's ``mamba_allocator`` + ``req.kv`` (the real 0.5.23 classes: tests/sglang_real)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch.probe.sglang.shapes import SHAPES, shape_for_version
from poolwatch_emulator.radix import TreeNode
from poolwatch_emulator.req import Req, RequestSpec
from poolwatch_emulator.req_pool import HybridReqToTokenPool
from rigs.fakes.sglang import SlotAllocator

Refusals = list[tuple[tuple[int, ...], tuple[str, ...], str]]


def _req(rid: str) -> Req:
    return Req(RequestSpec(rid, (1, 2, 3), 4, 0.0), [1, 2, 3])


def _rank(version: str) -> tuple[Any, HybridReqToTokenPool, FreeRefuser, Refusals]:
    """A rank of ``version``'s family on the emulator's pools, a live chunked request admitted."""
    shape = shape_for_version(version)
    pool = HybridReqToTokenPool(
        4,
        64,
        8,
        first_row=shape.req_first_row,
        mamba_first_id=shape.mamba_first_id,
        split_mamba_free=GUARD_PATHS[shape.family].mamba.request_free,
    )
    root = TreeNode()
    sched = SimpleNamespace(req_to_token_pool=pool, tree_cache=SimpleNamespace(root_node=root))
    sched.chunked_req = _req("long")
    assert pool.alloc_for([sched.chunked_req]) is not None
    seen: Refusals = []
    refuser = FreeRefuser(sched, lambda _pool, *a: seen.append(a[:3]), paths=GUARD_PATHS[shape.family])
    assert refuser.install()
    return sched, pool, refuser, seen


def _free_ids(pool: HybridReqToTokenPool) -> list[int]:
    return [int(i) for i in pool.mamba_pool.free_slots.tolist()]


def test_every_guarded_release_family_has_its_free_paths_stated() -> None:
    assert set(GUARD_PATHS) == {s.family for s in SHAPES if s.guarded}
    # 0.5.17 and 0.5.19, read for the probe first, are guarded too: no family is only watched
    assert {s.family for s in SHAPES if not s.guarded} == set()


@pytest.mark.parametrize("version", ["0.5.5.post3", "0.5.6"])
def test_the_row_free_with_the_mamba_default_is_refused_on_the_0_5_5_and_0_5_6_families(version: str) -> None:
    sched, pool, refuser, seen = _rank(version)
    chunked = sched.chunked_req
    slot, row = int(chunked.mamba_pool_idx), chunked.req_pool_idx
    before = _free_ids(pool)
    pool.free(row)  # the #12432 step: HybridReqToTokenPool.free(idx) frees the row's Mamba slot too
    assert _free_ids(pool) == before  # never reached the free list
    assert seen == [((slot,), ("long",), "mamba_pool.free")]
    other = _req("other")
    pool.alloc_for([other])
    pool.free(other.req_pool_idx)  # another request's row: freed as asked
    assert int(other.mamba_pool_idx) in _free_ids(pool)
    chunked.finished_reason = "abort"
    pool.mamba_pool.free(chunked.mamba_pool_idx)  # the abort release of a finished request
    assert slot in _free_ids(pool)
    assert refuser.refused == 1


@pytest.mark.parametrize("version", ["0.5.10", "0.5.12"])
def test_free_mamba_cache_of_the_live_chunked_request_is_refused_whole(version: str) -> None:
    sched, pool, refuser, seen = _rank(version)
    chunked = sched.chunked_req
    slot_tensor = chunked.mamba_pool_idx
    slot = int(slot_tensor)
    assert slot >= 1  # ids 1..size on these families
    pool.free_mamba_cache(chunked)
    assert chunked.mamba_pool_idx is slot_tensor  # the pointer is kept: the request keeps its slot
    assert slot not in _free_ids(pool)
    pool.mamba_pool.free(slot_tensor.reshape(1))  # a direct free of the same id
    assert slot not in _free_ids(pool)
    assert seen == [((slot,), ("long",), "free_mamba_cache"), ((slot,), ("long",), "mamba_pool.free")]
    chunked.finished_reason = "length"
    pool.free_mamba_cache(chunked)  # release_kv_cache of the finished request
    assert chunked.mamba_pool_idx is None
    assert slot in _free_ids(pool)
    assert refuser.refused == 2


def test_a_tree_nodes_slot_is_refused_on_the_0_5_12_family_unless_the_node_is_evicted() -> None:
    sched, pool, refuser, seen = _rank("0.5.12")
    node = TreeNode(sched.tree_cache.root_node)
    node.mamba_value = pool.mamba_pool.alloc(1)
    sched.tree_cache.root_node.children[1] = node
    refuser.refresh()
    slot = int(node.mamba_value)
    pool.mamba_pool.free(torch.tensor([slot]))  # a stale pointer freeing what the tree holds
    assert slot not in _free_ids(pool)
    pool.mamba_pool.free(node.mamba_value)  # eviction frees the node's own tensor
    assert slot in _free_ids(pool)
    assert [s for s, _, _ in seen] == [(slot,)]


def test_detach_gives_both_free_paths_back() -> None:
    _, pool, refuser, _ = _rank("0.5.12")
    assert "free_mamba_cache" in pool.__dict__
    assert "free" in pool.mamba_pool.__dict__
    refuser.uninstall()
    assert "free_mamba_cache" not in pool.__dict__
    assert "free" not in pool.mamba_pool.__dict__


class _Pool0523:
    def __init__(self) -> None:
        self.mamba_allocator = SlotAllocator(8)
        self.mamba_pool = SimpleNamespace(free=None)  # 0.5.23's MambaPool holds states only

    def free_mamba_cache(self, req: Any) -> None:
        self.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(0))
        req.kv.mamba_pool_idx = None


def test_the_0_5_23_family_wraps_mamba_allocator_and_free_mamba_cache_and_reads_req_kv() -> None:
    pool = _Pool0523()
    chunked = _req("long")
    chunked.kv = SimpleNamespace(mamba_pool_idx=pool.mamba_allocator.alloc(1)[0])  # type: ignore[attr-defined]
    node = TreeNode()
    node.mamba_value = pool.mamba_allocator.alloc(1)
    sched = SimpleNamespace(
        req_to_token_pool=pool, chunked_req=chunked, tree_cache=SimpleNamespace(root_node=TreeNode())
    )
    sched.tree_cache.root_node.children[1] = node
    seen: Refusals = []
    refuser = FreeRefuser(sched, lambda _pool, *a: seen.append(a[:3]), paths=GUARD_PATHS["0.5.23"])
    assert refuser.install()
    refuser.refresh()
    assert refuser.mamba is not None
    assert refuser.mamba.tree == {}  # this tree has no all_mamba_values_flatten: no tree proof
    slot = int(chunked.kv.mamba_pool_idx)  # type: ignore[attr-defined]
    pool.free_mamba_cache(chunked)
    pool.mamba_allocator.free(chunked.kv.mamba_pool_idx.unsqueeze(0))  # type: ignore[attr-defined]
    assert slot not in pool.mamba_allocator.free_slots.tolist()
    assert chunked.kv.mamba_pool_idx is not None  # type: ignore[attr-defined]
    assert [w for _, _, w in seen] == ["free_mamba_cache", "mamba_allocator.free"]
    pool.mamba_allocator.free(node.mamba_value)  # a tree value freed: no proof here, freed as asked
    assert int(node.mamba_value) in pool.mamba_allocator.free_slots.tolist()


class _Tree0523:
    """0.5.23's ``UnifiedRadixCache`` as the tree proof reads it: its own flattened Mamba values."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def all_mamba_values_flatten(self) -> torch.Tensor:
        return torch.cat(self.values) if self.values else torch.empty((0,), dtype=torch.int64)


class _CheckpointPool:
    """0.5.23's ``MambaCheckpointPool`` as far as a free goes."""

    def __init__(self, size: int) -> None:
        self.allocator = SlotAllocator(size)

    def free(self, slots: torch.Tensor) -> None:
        self.allocator.free(slots)


@pytest.mark.parametrize("checkpoints", [False, True])
def test_the_0_5_23_tree_proof_reads_the_trees_own_values_at_the_free(checkpoints: bool) -> None:
    """A slot the unified tree lists is refused (active pool, or the int8 checkpoint pool when
    it holds the tree's states); once the tree has dropped it (eviction tombstones the node before
    its value is freed) the same free goes through."""
    pool = _Pool0523()
    tree = _Tree0523()
    ckpt = _CheckpointPool(8) if checkpoints else None
    if ckpt is not None:
        pool.mamba_ckpt_pool = ckpt  # type: ignore[attr-defined]
    owner: Any = ckpt.allocator if ckpt is not None else pool.mamba_allocator
    value = owner.alloc(1)
    tree.values.append(value)
    sched = SimpleNamespace(req_to_token_pool=pool, chunked_req=None, tree_cache=tree)
    seen: Refusals = []
    refuser = FreeRefuser(sched, lambda _pool, *a: seen.append(a[:3]), paths=GUARD_PATHS["0.5.23"])
    assert refuser.install()
    refuser.refresh()  # the Mamba census
    slot = int(value[0])
    freed = ckpt if ckpt is not None else pool.mamba_allocator
    freed.free(value.clone())  # a stale pointer freeing what the tree holds
    assert slot not in owner.free_slots.tolist()
    where = "mamba_ckpt_pool.free" if checkpoints else "mamba_allocator.free"
    assert seen == [((slot,), ("tree",), where)]
    tree.values.clear()  # evicted: the node's value cleared first
    freed.free(value)
    assert slot in owner.free_slots.tolist()
    assert len(seen) == 1
    guard = refuser.checkpoints if checkpoints else refuser.mamba
    assert guard is not None
    assert guard.tree == {}  # the entry with no proof left is forgotten

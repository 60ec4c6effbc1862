"""Guard by ownership at the free, on the emulator's pools and small fakes of SGLang's shapes: the
tree's prefix of a held row, a pending PD transfer, and the tree's insertions and own frees since the
last census -- each refused before the pool runs, everything else freed as asked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.kv import KvGuard
from poolwatch.probe.sglang.guard.owners import TreePrefix
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.pending import Pending
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch.probe.sglang.guard.rows import RowBook
from poolwatch.probe.sglang.guard.slots import MAX_UNREAD, SlotGuard
from poolwatch.probe.sglang.guard.tree_index import TreeHooks, value_ids
from poolwatch_emulator.allocator import TokenToKVPoolAllocator
from poolwatch_emulator.req_pool import MambaPool, ReqToTokenPool

Seen = list[tuple[Pool, list[int], list[str], str, int]]


class Pool059(ReqToTokenPool):
    """0.5.9's request pool: ``alloc(reqs)`` names the requests it hands rows to."""

    def alloc(self, reqs: Any) -> list[int] | None:  # type: ignore[override]
        rows = super().alloc(len(reqs))
        for req, row in zip(reqs, rows or [], strict=False):
            req.req_pool_idx = row
        return rows


class Radix:  # a prefix-sharing tree (not a ChunkCache, not disabled)
    disable = False


class ChunkCache:
    disable = False


def _req(rid: str) -> Any:
    return SimpleNamespace(rid=rid, req_pool_idx=None, cache_protected_len=0, mamba_pool_idx=None)


class Sched(SimpleNamespace):
    """A PD prefill rank: SGLang's own processing of the inflight queue is a method."""

    def process_disagg_prefill_inflight_queue(self) -> None:
        """Polled done: each request released while still on the list, then the list replaced."""
        table = self.req_to_token_pool.req_to_token
        for req in self.disagg_prefill_inflight_queue:
            self.token_to_kv_pool_allocator.free(table[req.req_pool_idx, : req.allocated])
        self.disagg_prefill_inflight_queue = []


def _rank(tree: Any = None, *, page: int = 1) -> tuple[Any, KvGuard, Pending, Seen]:
    pool = Pool059(4, 64)
    sched = Sched(
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=TokenToKVPoolAllocator(256, page),
        tree_cache=tree if tree is not None else Radix(),
        disagg_prefill_inflight_queue=[],
    )
    rows = RowBook(pool)
    assert rows.install()
    pending = Pending(sched, ("mamba_pool_idx",))
    assert pending.install()
    seen: Seen = []
    prefix = TreePrefix(sched, rows.holder, GUARD_PATHS["0.5.9"].protected)
    guard = KvGuard(sched, rows, lambda *a: seen.append(a), lambda: False, prefix, pending)
    paths = GUARD_PATHS["0.5.9"]
    assert guard.install(paths.kv_entries, paths.direct_kv)
    return sched, guard, pending, seen


def _admit(sched: Any, req: Any, tokens: int, protected: int) -> torch.Tensor:
    (row,) = sched.req_to_token_pool.alloc([req])
    slots = sched.token_to_kv_pool_allocator.alloc(tokens)
    sched.req_to_token_pool.write(row, 0, slots)
    req.cache_protected_len, req.allocated = protected, tokens
    return slots


def _free_list(sched: Any) -> list[int]:
    alloc = sched.token_to_kv_pool_allocator
    return [*alloc.free_pages.tolist(), *alloc.release_pages.tolist()]


def test_a_free_from_column_0_of_a_held_row_loses_the_trees_prefix_and_frees_the_rest() -> None:
    sched, _, _, seen = _rank()
    b = _req("b")
    slots = _admit(sched, b, 8, protected=4)
    before = _free_list(sched)
    table = sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[b.req_pool_idx, :8])  # S13: [0, kv_allocated_len)
    assert _free_list(sched) == before + slots[4:].tolist()  # as the fixed [protected, allocated)
    assert seen == [
        (Pool.FULL, slots[:4].tolist(), ["tree (prefix of b)"], "token_to_kv_pool_allocator.free", 1)
    ]


def test_frees_from_the_protected_column_on_and_frees_of_unknown_rows_go_through() -> None:
    sched, _, _, seen = _rank()
    b = _req("b")
    slots = _admit(sched, b, 8, protected=4)
    table, alloc = sched.req_to_token_pool.req_to_token, sched.token_to_kv_pool_allocator
    alloc.free(table[b.req_pool_idx, 4:6])  # a release's own part
    (other,) = ReqToTokenPool.alloc(sched.req_to_token_pool, 1)  # a row handed out without a request
    sched.req_to_token_pool.write(other, 0, alloc.alloc(3))
    alloc.free(table[other, :3])
    b.req_pool_idx = None  # the request let the row go (a stale holder is never believed)
    alloc.free(table[1 if other != 1 else 2, :0])
    assert seen == []
    assert set(slots[4:6].tolist()) <= set(_free_list(sched))


def test_guard_keeps_no_released_request_alive_and_a_stale_free_through_its_row_is_still_refused() -> None:
    import gc
    import weakref

    class Req(SimpleNamespace):  # (weak references need a class of its own)
        pass

    sched, _, _, seen = _rank()
    b = Req(rid="b", req_pool_idx=None, cache_protected_len=0, mamba_pool_idx=None)
    slots = _admit(sched, b, 8, protected=4)
    row, table = b.req_pool_idx, sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[row, 4:8])  # the release: its own columns, then the row
    sched.req_to_token_pool.free(row)
    gone = weakref.ref(b)
    del b
    gc.collect()
    assert gone() is None  # the row's holder went with the row
    sched.token_to_kv_pool_allocator.free(table[row, :8])  # a stale pointer: the released row's proof
    assert seen == [(Pool.FULL, slots.tolist(), [], "token_to_kv_pool_allocator.free", 1)]


def test_the_prefix_is_the_requests_own_with_a_tree_that_shares_nothing() -> None:
    sched, _, _, seen = _rank(ChunkCache())
    b = _req("b")
    slots = _admit(sched, b, 6, protected=4)  # ChunkCache: the prefix is b's own earlier chunks
    sched.token_to_kv_pool_allocator.free(sched.req_to_token_pool.req_to_token[b.req_pool_idx, :6])
    assert seen == []
    assert set(slots.tolist()) <= set(_free_list(sched))


def test_a_pending_transfers_kv_is_refused_outside_sglangs_own_processing_of_the_queue() -> None:
    sched, _, _, seen = _rank()
    c = _req("c")
    slots = _admit(sched, c, 6, protected=0)
    sched.disagg_prefill_inflight_queue.append(c)
    table, alloc = sched.req_to_token_pool.req_to_token, sched.token_to_kv_pool_allocator
    before = _free_list(sched)
    alloc.free(table[c.req_pool_idx, :6])  # released while the transfer still reads it
    assert _free_list(sched) == before
    assert seen[0][1:3] == (slots.tolist(), ["c (transfer pending)"])
    sched.process_disagg_prefill_inflight_queue()  # SGLang's own window: its release goes through
    assert set(slots.tolist()) <= set(_free_list(sched))
    assert len(seen) == 1


def test_a_pending_requests_mamba_slot_is_refused_and_other_slots_freed() -> None:
    sched, _, pending, seen = _rank()
    mamba = MambaPool(8, first_id=1)
    guard = SlotGuard(
        Pool.MAMBA, "mamba_pool.free", lambda *a: seen.append(a), lambda: False, pending=pending
    )
    assert guard.install(mamba)
    c, other = mamba.alloc(1), mamba.alloc(1)
    req = _req("c")
    req.mamba_pool_idx = c
    sched.disagg_prefill_inflight_queue.append(req)
    mamba.free(torch.cat((c, other)))
    assert int(c) not in mamba.free_slots.tolist()
    assert int(other) in mamba.free_slots.tolist()
    assert seen == [(Pool.MAMBA, [int(c)], ["c (transfer pending)"], "mamba_pool.free", 1)]
    sched.disagg_prefill_inflight_queue = []  # done: the queue's own release frees it
    mamba.free(c)
    assert int(c) in mamba.free_slots.tolist()


class Component:
    def __init__(self, pool: MambaPool) -> None:
        self.pool = pool

    def _free_mamba_value(self, value: torch.Tensor) -> None:
        self.pool.free(value)


class UnifiedTree:
    """0.5.23's tree surface guard reads: ``insert(params)``, ``all_mamba_values_flatten()``, the
    Mamba component's own frees."""

    def __init__(self, pool: MambaPool) -> None:
        self.values: list[torch.Tensor] = []
        self.components = {"mamba": Component(pool)}

    def insert(self, params: Any) -> Any:
        exist = any(torch.equal(v, params.mamba_value) for v in self.values)
        if not exist:
            self.values.append(params.mamba_value)
        return SimpleNamespace(prefix_len=0, mamba_exist=exist)

    def evict(self) -> None:
        value = self.values.pop(0)
        self.components["mamba"]._free_mamba_value(value)

    def all_mamba_values_flatten(self) -> torch.Tensor:
        return torch.cat(self.values) if self.values else torch.empty((0,), dtype=torch.int64)


def _unified(kind: type[UnifiedTree] = UnifiedTree) -> tuple[MambaPool, UnifiedTree, SlotGuard, Seen]:
    mamba, seen = MambaPool(8, first_id=1), []
    tree = kind(mamba)
    guard = SlotGuard(
        Pool.MAMBA, "mamba_allocator.free", lambda *a: seen.append(a), lambda: False, tree="flat"
    )
    assert guard.install(mamba)
    guard.refresh(tree)  # the last census: the tree holds nothing
    hooks = TreeHooks(tree, lambda value, ckpt: guard.took(value))
    assert hooks.install()
    guard.hooks = hooks
    return mamba, tree, guard, seen


def test_a_slot_the_unified_tree_took_since_the_census_is_refused_and_its_eviction_goes_through() -> None:
    mamba, tree, guard, seen = _unified()
    slot = mamba.alloc(1)
    tree.insert(SimpleNamespace(mamba_value=slot.clone()))  # no census since
    mamba.free(slot.clone())  # a stale pointer's free
    assert int(slot) not in mamba.free_slots.tolist()
    assert seen == [(Pool.MAMBA, [int(slot)], ["tree"], "mamba_allocator.free", 1)]
    tree.evict()  # the tree's own free: forgotten, passed, no re-read needed
    assert int(slot) in mamba.free_slots.tolist()
    assert int(slot) not in guard.tree
    assert len(seen) == 1


def test_an_insertion_that_found_the_value_there_gives_the_tree_nothing() -> None:
    mamba, tree, guard, seen = _unified()
    slot = mamba.alloc(1)
    tree.insert(SimpleNamespace(mamba_value=slot.clone()))
    dup = slot.clone()
    tree.values = [torch.tensor([99])]  # the tree holds another state for that prefix
    guard.tree.clear()
    tree.insert(SimpleNamespace(mamba_value=torch.tensor([99])))  # mamba_exist: not taken
    mamba.free(dup)  # the request's own slot, freed by the caller: not the tree's
    assert seen == []
    assert int(slot) in mamba.free_slots.tolist()


class LegacyTree:
    """0.5.4's ``insert(key, value, mamba_value) -> (prefix_len, mamba_exist)``; eviction frees the
    node's own tensor."""

    def __init__(self, pool: MambaPool) -> None:
        self.pool, self.held = pool, []

    def insert(self, key: Any, value: Any = None, mamba_value: Any = None) -> tuple[int, bool]:
        self.held.append(mamba_value)
        return 0, False

    def evict(self) -> None:
        self.pool.free(self.held.pop(0))


@pytest.mark.parametrize("stale", [True, False])
def test_up_to_0512_the_inserted_tensor_is_the_trees_until_it_frees_that_tensor_itself(stale: bool) -> None:
    mamba, seen = MambaPool(8, first_id=1), []
    tree = LegacyTree(mamba)
    guard = SlotGuard(Pool.MAMBA, "mamba_pool.free", lambda *a: seen.append(a), lambda: False, tree="node")
    assert guard.install(mamba)
    hooks = TreeHooks(tree, lambda value, ckpt: guard.took(value))
    assert hooks.install()
    slot = mamba.alloc(1)
    tree.insert(None, None, slot.reshape(1, 1).clone())
    if stale:
        mamba.free(slot.clone())  # the request's stale pointer: the same id, another tensor
        assert seen
        assert seen[0][1] == [int(slot)]
    tree.evict()
    assert mamba.free_slots.tolist().count(int(slot)) == 1
    assert len(seen) == int(stale)


class Counted:
    """A tree value that counts its host reads (an insertion's value, as ``_inserted`` sees it)."""

    def __init__(self, slot: int, readable: bool = True) -> None:
        self.slot, self.readable, self.reads = slot, readable, 0

    def reshape(self, *shape: int) -> Counted:
        return self

    def tolist(self) -> list[int]:
        self.reads += 1
        if not self.readable:
            raise RuntimeError("device lost")
        return [self.slot]


class Taking(UnifiedTree):
    """A tree that takes whatever it is given (the fake's own duplicate check compares tensors)."""

    def insert(self, params: Any) -> Any:
        return SimpleNamespace(prefix_len=0, mamba_exist=False)


def test_an_insertion_reads_nothing_the_next_free_reads_what_the_tree_took_and_the_census_drops_it() -> None:
    mamba, tree, guard, seen = _unified(Taking)
    first, second = mamba.alloc(1), mamba.alloc(1)
    taken = [Counted(int(first)), Counted(int(second), readable=False)]
    for value in taken:
        tree.insert(SimpleNamespace(mamba_value=value))
    assert [v.reads for v in taken] == [0, 0]  # no host read (a device read on a GPU) at an insertion
    assert guard.unread == taken
    tree.values = [first.clone(), second.clone()]  # (what the tree holds, as SGLang flattens it)
    mamba.free(first.clone())  # a stale pointer's free: the index is read first, and proves it
    assert seen == [(Pool.MAMBA, [int(first)], ["tree"], "mamba_allocator.free", 1)]
    assert [v.reads for v in taken] == [1, 1]
    assert guard.unread == []
    mamba.free(second.clone())  # its value could not be read: no proof, freed as asked (a miss)
    assert int(second) in mamba.free_slots.tolist()
    assert len(seen) == 1
    tree.insert(SimpleNamespace(mamba_value=Counted(7)))
    guard.refresh(tree)  # the census reads the tree whole: nothing left unread
    assert guard.unread == []


def test_the_values_kept_unread_are_bounded() -> None:
    _, tree, guard, _ = _unified(Taking)
    values = [Counted(100 + i) for i in range(MAX_UNREAD + 1)]
    for value in values:
        tree.insert(SimpleNamespace(mamba_value=value))
    assert guard.unread == []
    assert all(v.reads == 1 for v in values)
    assert set(guard.tree) >= {100 + i for i in range(MAX_UNREAD + 1)}


def test_the_refuser_wires_the_index_on_a_pd_prefill_rank_and_gives_everything_back() -> None:
    sched = Sched(
        req_to_token_pool=Pool059(4, 64),
        token_to_kv_pool_allocator=TokenToKVPoolAllocator(256, 1),
        tree_cache=Radix(),
        disagg_prefill_inflight_queue=[],
    )
    refuser = FreeRefuser(sched, lambda *a: None, paths=GUARD_PATHS["0.5.9"])
    assert refuser.install()
    assert refuser.pending is not None
    assert refuser.kv is not None
    assert "process_disagg_prefill_inflight_queue" in vars(sched)
    refuser.uninstall()
    assert refuser.pending is None
    assert refuser.hooks is None


def test_an_insertion_without_a_mamba_tensor_indexes_nothing() -> None:
    took: list[Any] = []

    class Radix059:  # a plain radix tree's insert(key, value, chunked): no Mamba value there
        def insert(self, key: Any, value: Any = None, chunked: bool = False) -> int:
            return 0

    tree = Radix059()
    hooks = TreeHooks(tree, lambda value, ckpt: took.append(value))
    assert hooks.install()
    assert tree.insert("k", torch.tensor([1, 2]), True) == 0
    assert took == []
    hooks.uninstall()
    assert "insert" not in vars(tree)


@pytest.mark.parametrize(
    ("tensors", "ids"),
    [
        ([torch.tensor([7], dtype=torch.int32)], [7]),  # an insertion's value: read as it is
        ([torch.tensor(5)], [5]),
        ([torch.tensor([[1, 2], [3, 4]])], [1, 2, 3, 4]),
        ([torch.tensor([], dtype=torch.int64)], []),
        ([torch.tensor([3]), torch.tensor([[4], [5]], dtype=torch.int32)], [3, 4, 5]),  # a census's nodes
        ([], []),
    ],
)
def test_the_ids_a_tree_value_holds_are_read_flat_whatever_the_shape(
    tensors: list[Any], ids: list[int]
) -> None:
    out = value_ids(tensors)
    assert out == ids
    assert all(type(i) is int for i in out)

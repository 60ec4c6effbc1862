"""The identity census: pure id arithmetic (hypothesis) and the Mamba/KV censuses on fakes."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import id_census
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.counter_census import tree_lock_counts, tree_root
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census, tree_is_empty, tree_values
from poolwatch.probe.sglang.requests import collect_live
from poolwatch.probe.sglang.shapes import shape_for_version
from rigs.fakes.sglang import Rank


@st.composite
def partitions(draw: st.DrawFn) -> tuple[int, int, list[int], list[int], list[int]]:
    """An id range split into free, tree and live ids (every id exactly once)."""
    size = draw(st.integers(min_value=1, max_value=200))
    first = draw(st.sampled_from([0, 1]))
    owners = draw(st.lists(st.sampled_from("ftq"), min_size=size, max_size=size))
    ids = draw(st.permutations(range(first, first + size)))
    split = {k: [i for i, o in zip(ids, owners, strict=True) if o == k] for k in "ftq"}
    return size, first, split["f"], split["t"], split["q"]


@settings(max_examples=40)
@given(partitions())
def test_a_clean_partition_of_the_id_range_trips_nothing(
    part: tuple[int, int, list[int], list[int], list[int]],
) -> None:
    size, first, free, tree, live = part
    census = id_census(Pool.MAMBA, size, first, free, tree, live, check_missing=True)
    assert census.tripwires("h", 1) == ()
    assert census.missing_count == 0


@settings(max_examples=40)
@given(partitions(), st.data())
def test_freeing_a_live_slot_again_is_found_and_named(
    part: tuple[int, int, list[int], list[int], list[int]], data: st.DataObject
) -> None:
    size, first, free, tree, live = part
    if not live:
        return
    slot = data.draw(st.sampled_from(live))
    census = id_census(Pool.MAMBA, size, first, [*free, slot], tree, live, check_missing=True)
    kinds = {t.kind: t.slots for t in census.tripwires("h", 1)}
    assert kinds[TripwireKind.FREE_AND_LIVE] == (slot,)
    assert (TripwireKind.OVER_SIZE in kinds) == (len(free) + 1 > size)


@settings(max_examples=40)
@given(partitions(), st.data())
def test_a_lost_slot_is_missing_at_idle_but_not_reported_while_busy(
    part: tuple[int, int, list[int], list[int], list[int]], data: st.DataObject
) -> None:
    size, first, free, tree, live = part
    if not free:
        return
    lost = data.draw(st.sampled_from(free))
    rest = [i for i in free if i != lost]
    idle = id_census(Pool.MAMBA, size, first, rest, tree, live, check_missing=True)
    busy = id_census(Pool.MAMBA, size, first, rest, tree, live, check_missing=False)
    assert idle.missing == (lost,)
    assert idle.missing_count == 1
    assert busy.missing is None
    assert busy.tripwires("h", 1) == ()


def test_ids_outside_the_release_range_are_out_of_range() -> None:
    # 0.5.9+ numbers Mamba slots 1..size: id 0 on the free list is foreign
    census = id_census(Pool.MAMBA, 4, 1, [0, 1, 2], [3], [4], check_missing=False)
    assert census.out_of_range == (0,)


def test_the_mamba_census_reads_tree_values_by_walking_a_0_5_4_tree() -> None:
    rank = Rank(mamba=8)
    rank.cache(4)
    rank.cache(3, locked=True)
    rank.running("a", origin=6, outputs=2)
    reading, shape = Reading(), shape_for_version("0.5.4.post1")
    live = collect_live(rank.sched, reading, "null")
    census = mamba_census(rank.sched, shape, reading, live, idle=False)
    assert census is not None
    assert (census.free, census.tree, census.live) == (5, 2, 1)
    assert census.tripwires("h", 0) == ()


def test_the_kv_census_finds_a_live_slot_on_the_free_list() -> None:
    rank = Rank(kv=32)
    rank.cache(5)
    req = rank.running("a", origin=8, outputs=2)
    assert req.req_pool_idx is not None
    stolen = int(rank.rows.req_to_token[req.req_pool_idx, 3])
    rank.alloc.free(torch.tensor([stolen]))
    reading, shape = Reading(), shape_for_version("0.5.4.post1")
    census = kv_census(rank.sched, shape, reading, collect_live(rank.sched, reading, "null"), idle=False)
    assert census is not None
    assert reading.failures == {}
    assert census.free_and_live == (stolen,)
    assert census.duplicates == ()


def test_the_kv_census_at_idle_names_a_lost_slot_and_a_double_free() -> None:
    rank = Rank(kv=16)
    node = rank.cache(4)
    lost = rank.alloc.take(1)  # taken and never returned
    rank.alloc.free(node.value[:1])  # a tree slot freed while the tree still owns it
    rank.alloc.free(torch.tensor([9]))  # slot 9 is already free: now twice
    reading, shape = Reading(), shape_for_version("0.5.4.post1")
    census = kv_census(rank.sched, shape, reading, collect_live(rank.sched, reading, "null"), idle=True)
    assert census is not None
    assert census.missing == (int(lost),)
    assert census.missing_count == 1
    assert census.free_and_tree == (int(node.value[0]),)
    assert census.duplicates == (9,)


class UnifiedTree:
    """0.5.23's unified tree as its Python side is: the nodes live in a tree core, ``root_node``
    raises, the counters and a flatten helper answer."""

    def __init__(self, values: list[torch.Tensor]) -> None:
        self.values = values

    @property
    def root_node(self) -> object:
        raise NotImplementedError("root_node: not ported to the tree core")

    def evictable_size(self) -> int:
        return sum(int(v.numel()) for v in self.values)

    def protected_size(self) -> int:
        return 0

    def all_values_flatten(self) -> torch.Tensor:
        return torch.cat(self.values)


def test_a_tree_whose_root_raises_is_read_by_its_counters_and_flatten_helper() -> None:
    """The census reads 0.5.23's tree through what it answers; a raising ``root_node`` is no tree
    to walk (it once made the Mamba census fail whole: no tripwire for a live slot freed again)."""
    empty, held = UnifiedTree([]), UnifiedTree([torch.tensor([3, 4])])
    assert tree_root(empty) is None
    assert tree_is_empty(empty)
    assert tree_values(empty, "all_values_flatten", "value") == []
    assert [v.tolist() for v in tree_values(held, "all_values_flatten", "value")] == [[3, 4]]
    assert tree_lock_counts(held, "lock_ref", "value") is None

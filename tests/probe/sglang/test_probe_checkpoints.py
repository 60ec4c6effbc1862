"""The int8 Mamba checkpoint pool (0.5.23 ``--enable-int8-mamba-checkpoint``) on SGLang-shaped fakes:
two Mamba accounts, read as SGLang's ``mamba-active`` and ``mamba-int8`` checks read them."""

from __future__ import annotations

from dataclasses import replace

import torch
from tests.probe.sglang.setups import by_hand

from poolwatch.conservation import gap
from poolwatch.model.findings import RepairKind, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import MambaPool, Rank

CONFIG = by_hand("0.5.9")


class CheckpointPool:
    """``MambaCheckpointPool``'s accounting face: ``num_slots`` and its allocator's free count."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self.allocator = MambaPool(num_slots, 1)

    def alloc(self, n: int = 1) -> torch.Tensor:
        return torch.cat([self.allocator.take().reshape(1) for _ in range(n)])

    def available_size(self) -> int:
        return self.allocator.available_size()


def rank_with_checkpoints() -> tuple[Rank, CheckpointPool]:
    """A running request on the active pool and two tree nodes whose states are checkpoints."""
    rank = Rank(kv=64, mamba=8, rows=4, mamba_first_id=1)
    ckpt = CheckpointPool(16)
    rank.rows.mamba_ckpt_pool = ckpt  # type: ignore[attr-defined]
    rank.tree.add(rank.alloc.take(4), ckpt.alloc(1), locked=False)  # checkpoint ids overlap active ids
    rank.tree.add(rank.alloc.take(3), ckpt.alloc(1), locked=True)
    rank.running("a", origin=5, outputs=1)
    return rank, ckpt


def sample(rank: Rank) -> SglangProbe:
    clock = FakeClock()
    probe = new_probe(
        SGLANG, rank.sched, replace(CONFIG), environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock
    )
    probe.sample_now()
    return probe


def test_both_mamba_accounts_balance_and_no_tree_slot_is_taken_for_an_active_one() -> None:
    rank, _ = rank_with_checkpoints()
    snap = sample(rank).latest
    assert snap is not None
    active, checkpoints = snap.pools[Pool.MAMBA], snap.pools[Pool.MAMBA_CKPT]
    assert (active.evictable, active.protected, active.held, gap(active)) == (0, 0, 1, 0)
    assert (checkpoints.size, checkpoints.available, checkpoints.evictable, checkpoints.protected) == (
        16,
        14,
        1,
        1,
    )
    assert gap(checkpoints) == 0
    assert snap.tripwires == ()  # checkpoint id 1 is on the tree, active id 1 is free: no finding


def test_a_lost_checkpoint_slot_is_a_deficit_on_the_checkpoint_pool_only() -> None:
    rank, ckpt = rank_with_checkpoints()
    ckpt.alloc(1)
    snap = sample(rank).latest
    assert snap is not None
    assert (gap(snap.pools[Pool.MAMBA]), gap(snap.pools[Pool.MAMBA_CKPT])) == (0, 1)


def test_without_a_checkpoint_pool_the_tree_counts_against_the_active_pool() -> None:
    rank = Rank(kv=64, mamba=8, rows=4, mamba_first_id=1)
    rank.cache(4)
    snap = sample(rank).latest
    assert snap is not None
    assert Pool.MAMBA_CKPT not in snap.pools
    assert snap.pools[Pool.MAMBA].evictable == 1
    assert gap(snap.pools[Pool.MAMBA]) == 0


def test_a_tree_held_checkpoint_slot_on_the_free_list_is_named_by_slot_id() -> None:
    rank, ckpt = rank_with_checkpoints()
    ckpt.allocator.free(torch.tensor([1]))  # checkpoint slot 1 is a tree node's state
    snap = sample(rank).latest
    assert snap is not None
    assert gap(snap.pools[Pool.MAMBA_CKPT]) == -1
    named = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
    assert (TripwireKind.FREE_AND_TREE, Pool.MAMBA_CKPT, (1,)) in named
    assert all(t.pool is Pool.MAMBA_CKPT for t in snap.tripwires)  # active slot 1 stays free, unnamed


def test_a_lost_checkpoint_slot_is_named_by_slot_id() -> None:
    rank, ckpt = rank_with_checkpoints()
    (lost,) = ckpt.alloc(1).tolist()
    snap = sample(rank).latest
    assert snap is not None
    named = [(t.kind, t.pool, t.slots) for t in snap.tripwires]
    assert named == [(TripwireKind.MISSING, Pool.MAMBA_CKPT, (lost,))]


def guarded(rank: Rank) -> SglangProbe:
    clock = FakeClock()
    config = replace(CONFIG, guard=True)
    probe = new_probe(SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)
    probe.sample_now()
    return probe


def test_guard_takes_a_tree_held_checkpoint_slot_off_its_free_list_and_names_it() -> None:
    rank, ckpt = rank_with_checkpoints()
    ckpt.allocator.free(torch.tensor([1]))  # checkpoint slot 1 is a tree node's state
    active_free = sorted(rank.mamba.free_slots.tolist())
    snap = guarded(rank).latest
    assert snap is not None
    assert 1 not in ckpt.allocator.free_slots.tolist()
    assert sorted(rank.mamba.free_slots.tolist()) == active_free  # the active pool's slot 1 untouched
    repairs = [(r.kind, r.pool, r.slots) for r in snap.repairs]
    assert repairs == [(RepairKind.QUARANTINE, Pool.MAMBA_CKPT, (1,))]
    assert gap(snap.pools[Pool.MAMBA_CKPT]) == 0
    assert snap.tripwires == ()


def test_without_guard_the_checkpoint_free_list_is_left_as_it_is() -> None:
    rank, ckpt = rank_with_checkpoints()
    ckpt.allocator.free(torch.tensor([1]))
    snap = sample(rank).latest
    assert snap is not None
    assert 1 in ckpt.allocator.free_slots.tolist()
    assert snap.repairs == ()

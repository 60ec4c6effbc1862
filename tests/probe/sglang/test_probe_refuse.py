"""Guard v2 on SGLang-shaped fakes: a free of a slot still owned is refused before the pool's free runs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from tests.detect.emulated import scenario
from tests.probe.sglang.setups import by_hand

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.conservation import findings, gap
from poolwatch.detect.alert import Signal
from poolwatch.detect.families.repairs import GuardRepairs
from poolwatch.detect.family import Seen
from poolwatch.model.findings import RepairKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from rigs.emulated.watched import Watched
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import MambaPool, Rank

CONFIG = by_hand()


def probe_for(rank: Rank, *, guard: bool, version: str = "0.5.4.post1", directory: str = "") -> SglangProbe:
    clock = FakeClock()
    config = replace(CONFIG, guard=guard, release=version, directory=directory or CONFIG.directory)
    return new_probe(SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)


def findings_gaps(snap: Snapshot) -> list[int]:
    """Every exact pool gap of ``snap`` (0 where balanced)."""
    return [g for a in snap.pools.values() if (g := gap(a)) is not None]


def repair_signals(snap: Snapshot) -> list[Signal]:
    """PoolwatchProbeRepaired's signals for ``snap``, as the detector's family raises them."""
    return GuardRepairs().signals(Seen(snap, findings(snap)))


def free_ids(rank: Rank) -> list[int]:
    return [int(i) for i in rank.mamba.free_slots.tolist()]


def test_guard_off_leaves_the_pools_free_alone() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    probe_for(rank, guard=False)
    assert "free" not in rank.mamba.__dict__  # not wrapped: zero cost on the free path
    assert req.mamba_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))
    assert int(req.mamba_pool_idx) in free_ids(rank)


def test_the_seed_free_of_the_live_chunked_requests_slot_is_refused_before_it_runs() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    other = int(rank.mamba.take())  # a slot nobody owns any more, freed in the same call
    probe = probe_for(rank, guard=True)
    probe.seq = 6
    assert req.mamba_pool_idx is not None
    slot = int(req.mamba_pool_idx)
    before = free_ids(rank)
    rank.mamba.free(torch.tensor([slot, other]))  # what HybridReqToTokenPool.free does on 0.5.4
    assert free_ids(rank) == [*before, other]  # the owned slot never reached the list
    assert probe.refuser is not None
    assert probe.refuser.refused == 1
    probe.on_loop_boundary("recv_requests")  # the refusal is published at the next hook
    snap = probe.latest
    assert snap is not None
    (repair,) = snap.repairs
    assert (repair.kind, repair.pool, repair.count, repair.slots, repair.requests) == (
        RepairKind.REFUSE,
        Pool.MAMBA,
        1,
        (slot,),
        ("long",),
    )
    assert (repair.hook, repair.seq) == ("mamba_pool.free", 6)
    assert snap.tripwires == ()  # nothing went wrong in the pool: nothing to repair later
    (signal,) = repair_signals(snap)
    assert "refused to free 1 slot still owned" in signal.description


def test_a_finished_chunked_request_frees_its_slot() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    probe = probe_for(rank, guard=True)
    req.finished_reason = "abort"
    assert req.mamba_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))
    assert int(req.mamba_pool_idx) in free_ids(rank)
    assert probe.refuser is not None
    assert probe.refuser.refused == 0


def test_a_tree_nodes_slot_is_refused_unless_the_node_itself_is_evicted() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    node = rank.cache(4)
    kept = rank.cache(3)
    probe = probe_for(rank, guard=True)
    probe.sample_now()  # a Mamba census: the tree proof's index is taken there
    assert node.mamba_value is not None
    assert kept.mamba_value is not None
    slot = int(node.mamba_value)
    rank.mamba.free(torch.tensor([slot]))  # a stale pointer freeing what the tree owns
    assert slot not in free_ids(rank)
    rank.mamba.free(node.mamba_value)  # eviction: the node's own tensor, let through
    node.mamba_value = None
    assert slot in free_ids(rank)
    again = rank.mamba.take()  # the slot's next owner frees it later: no proof left
    rank.mamba.free(again)
    assert free_ids(rank).count(slot) == 1
    assert probe.refuser is not None
    assert probe.refuser.refused == 1
    rank.mamba.free(torch.tensor([int(kept.mamba_value)]))
    assert probe.refuser.refused == 2


def test_a_kill_switch_lets_every_free_through(tmp_path: Path) -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    probe = probe_for(rank, guard=True, directory=str(tmp_path))
    probe.disable()
    assert req.mamba_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))
    assert int(req.mamba_pool_idx) in free_ids(rank)


def test_every_family_with_a_mamba_pool_free_is_wrapped_and_one_without_it_is_not() -> None:
    for version in ("0.5.5.post3", "0.5.6", "0.5.10", "0.5.12"):
        rank = Rank(kv=64, mamba=8, rows=4)
        probe = probe_for(rank, guard=True, version=version)
        assert probe.refuser is not None, version
        assert "free" in rank.mamba.__dict__
    rank = Rank(kv=64, mamba=8, rows=4)  # newer than the newest release read: off, as "return" is
    assert probe_for(rank, guard=True, version="0.6.0").refuser is None
    assert "free" not in rank.mamba.__dict__
    rank = Rank(kv=64, mamba=8, rows=4)  # 0.5.23 frees through mamba_allocator, which this rank lacks
    probe = probe_for(rank, guard=True, version="0.5.23")
    assert probe.refuser is None
    assert "free" not in rank.mamba.__dict__


def test_detach_gives_the_pool_its_own_free_back() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    attach(SGLANG, rank.sched, replace(CONFIG, guard=True), serve=False)
    assert "free" in rank.mamba.__dict__
    detach(rank.sched)
    assert "free" not in rank.mamba.__dict__
    assert rank.mamba.free.__func__ is MambaPool.free  # type: ignore[attr-defined]


def test_the_emulated_seed_fault_is_refused_on_every_strike_and_nothing_needs_repair(tmp_path: Path) -> None:
    fault = "pd-chunked-mamba-double-free"
    w = Watched(scenario(fault, "@step=40"), tmp_path, guard=True)
    w.run_until(lambda: fault in w.struck, 6000)
    step = w.cluster.steps
    w.run_until(lambda: w.cluster.steps >= step + 400, 400)
    assert fault in w.struck
    assert not w.cluster.crashed  # SGLang's idle check never saw a surplus
    probes = [p for rank in w.cluster.schedulers if (p := probe_of(rank)) is not None]
    refused = sum(p.refuser.refused for p in probes if p.refuser is not None)
    kinds = {r.kind for p in probes if p.latest is not None for r in p.latest.repairs}
    assert refused > 0
    assert kinds == {RepairKind.REFUSE}  # no quarantine, no duplicate: the wrong free never ran


def test_the_emulated_swa_page_double_free_is_refused_in_slots_with_page_ids(tmp_path: Path) -> None:
    """#27789's class on the emulator: a finishing request's last SWA page freed a second time,
    straight on the pair's sliding-window side.  Guard v2 refuses it before it runs (nothing to
    deduplicate afterwards); the refusal counts 16 slots (the gap's unit) and names the page id, in
    the snapshot, its JSON and the alert's sentence."""
    fault = "swa-page-overcount"
    w = Watched(scenario(fault, "@step=40"), tmp_path, guard=True)
    w.run_until(lambda: fault in w.struck, 6000)
    step = w.cluster.steps
    w.run_until(lambda: w.cluster.steps >= step + 50, 50)
    repairs = [
        (p.latest, r)
        for rank in w.cluster.schedulers
        if (p := probe_of(rank)) is not None and p.latest is not None
        for r in p.latest.repairs
    ]
    ((snap, repair),) = repairs
    assert (repair.kind, repair.pool, repair.page_size) == (RepairKind.REFUSE, Pool.SWA, 16)
    assert repair.hook == "token_to_kv_pool_allocator.swa_attn_allocator.free"
    assert repair.count == 16 * len(repair.slots)
    assert parse_snapshot(dump_snapshot(snap)).repairs == snap.repairs
    assert all(g == 0 for g in findings_gaps(snap))  # the page never reached the free list twice
    (signal,) = [s for s in repair_signals(snap) if dict(s.labels).get("pool") == "swa"]
    assert f"refused to free {repair.count} slots" in signal.description
    assert f"page(s) of 16 slots [{repair.slots[0]}]" in signal.description
    assert signal.value == 16.0


def test_a_refusal_stands_when_recording_it_fails() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)

    def broken(pool: Pool, slots: tuple[int, ...], requests: tuple[str, ...], where: str, page: int) -> None:
        raise RuntimeError("no log")

    refuser = FreeRefuser(rank.sched, broken)
    assert refuser.install()
    assert req.mamba_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))
    assert int(req.mamba_pool_idx) not in free_ids(rank)
    assert refuser.refused == 1
    refuser.uninstall()
    assert "free" not in rank.mamba.__dict__

"""Guard mode on SGLang-shaped fakes: quarantine, deduplicate, return at idle; off by default."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tests.probe.sglang.setups import GUARD_CONFIG as CONFIG
from tests.probe.sglang.setups import seed_rank

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.conservation import gap
from poolwatch.discovery.directory import read_discovery_dir
from poolwatch.discovery.files import read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.findings import RepairKind, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig, ProbeConfigError
from poolwatch.probe.core.engine import Release
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch.probe.sglang.shapes import NEWEST_RELEASE, known_release, shape_for_version
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank


def probe_for(rank: Rank, *, guard: bool, directory: str = CONFIG.directory) -> SglangProbe:
    clock = FakeClock()
    config = replace(CONFIG, guard=guard, directory=directory)
    return new_probe(SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)


def free_mamba(rank: Rank) -> list[int]:
    return [int(i) for i in rank.mamba.free_slots.tolist()]


def mamba_gap(snap: Snapshot | None) -> int | None:
    assert snap is not None
    return gap(snap.pools[Pool.MAMBA])


def test_guard_is_off_by_default_and_the_seed_slot_stays_on_the_free_list() -> None:
    assert ProbeConfig.from_env({}).guard is False
    rank, slot = seed_rank()
    probe = probe_for(rank, guard=False)
    probe.after_prefill_chunk("process_prefill_chunk")
    assert slot in free_mamba(rank)
    assert probe.latest is not None
    assert probe.latest.repairs == ()
    assert {t.kind for t in probe.latest.tripwires} >= {TripwireKind.FREE_AND_LIVE}


def test_guard_quarantines_the_chunked_requests_slot_right_after_process_prefill_chunk() -> None:
    rank, slot = seed_rank()
    probe = probe_for(rank, guard=True)
    probe.seq = 4
    probe.after_prefill_chunk("process_prefill_chunk")
    assert slot not in free_mamba(rank)
    snap = probe.latest
    assert snap is not None
    (repair,) = snap.repairs
    assert (repair.kind, repair.pool, repair.count, repair.slots) == (
        RepairKind.QUARANTINE,
        Pool.MAMBA,
        1,
        (slot,),
    )
    assert (repair.hook, repair.seq, repair.requests) == ("process_prefill_chunk", 4, ("long",))
    assert snap.tripwires == ()  # repaired: reported as a repair, not as a standing fault
    assert mamba_gap(snap) == 0
    assert snap.probe is not None
    assert snap.probe.guard


def test_guard_removes_a_duplicate_free_entry_when_a_sample_shows_a_surplus() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.running("a", origin=5, outputs=1)
    twice = int(rank.mamba.free_slots[0])
    rank.mamba.free(torch.tensor([twice]))  # a slot on the free list twice
    probe = probe_for(rank, guard=True)
    snap = probe.sample_now("recv_requests")
    assert free_mamba(rank).count(twice) == 1
    assert mamba_gap(snap) == 0
    assert snap is not None
    assert [(r.kind, r.slots) for r in snap.repairs] == [(RepairKind.DEDUPLICATE, (twice,))]


def test_guard_returns_a_lost_slot_at_idle_before_sglangs_check_and_not_while_busy() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    lost = int(rank.mamba.take())  # taken and never given back: a leak
    waiting = rank.waiting("w", cow=False)  # busy: a lost slot is not proven yet
    probe = probe_for(rank, guard=True)
    probe.on_idle("self_check_during_idle")
    assert lost not in free_mamba(rank)
    probe.on_loop_boundary("recv_requests")
    assert lost not in free_mamba(rank)
    rank.sched.waiting_queue.remove(waiting)  # the last request left during this iteration
    probe.on_idle("self_check_during_idle")
    assert lost in free_mamba(rank)
    snap = probe.latest
    assert mamba_gap(snap) == 0
    assert snap is not None
    assert not snap.final
    assert [(r.kind, r.slots, r.hook) for r in snap.repairs] == [
        (RepairKind.RETURN, (lost,), "self_check_during_idle")
    ]


def test_a_kill_switch_stops_the_guard(tmp_path: Path) -> None:
    rank, slot = seed_rank()
    probe = probe_for(rank, guard=True, directory=str(tmp_path))
    (tmp_path / "DISABLE").touch()
    probe.after_prefill_chunk("process_prefill_chunk")
    assert slot in free_mamba(rank)
    with pytest.raises(ProbeConfigError, match="POOLWATCH_PROBE_GUARD"):
        ProbeConfig.from_env({"POOLWATCH_PROBE_GUARD": "maybe"})


def test_a_certain_crash_leaves_a_final_snapshot_naming_the_slot_and_hook(tmp_path: Path) -> None:
    rank, slot = seed_rank()
    probe = probe_for(rank, guard=False, directory=str(tmp_path))
    probe.after_prefill_chunk("process_prefill_chunk")
    rank.sched.chunked_req = None  # the request finished; its slot went back once more at release
    rank.sched.last_batch = None
    probe.on_loop_boundary("recv_requests")
    probe.on_idle("self_check_during_idle")
    ((name, doc),) = read_final_dir(tmp_path, read_secret(tmp_path) or "")
    final = parse_snapshot(doc)
    assert name == "w0-dp0-tp0-pp0.final"
    assert final.final
    assert any(t.slots == (slot,) and t.first_seen_hook == "process_prefill_chunk" for t in final.tripwires)
    assert read_discovery_dir(tmp_path) == []  # never mistaken for a discovery file
    assert probe.final_cost > 0


def test_no_final_snapshot_where_sglangs_idle_check_only_warns(tmp_path: Path) -> None:
    rank, _ = seed_rank()
    rank.sched.chunked_req = rank.sched.last_batch = None
    clock = FakeClock()
    config = replace(CONFIG, directory=str(tmp_path), release="0.5.6")
    environ = {"POOLWATCH_WORKER": "w0", "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "0"}
    probe = new_probe(SGLANG, rank.sched, config, environ=environ, clock=clock, wall=clock)
    probe.on_idle("self_check_during_idle")
    assert read_final_dir(tmp_path, read_secret(tmp_path) or "") == []


def test_repairs_and_request_ids_survive_the_json_round_trip() -> None:
    rank, _ = seed_rank()
    probe = probe_for(rank, guard=True)
    probe.after_prefill_chunk("process_prefill_chunk")
    snap = probe.latest
    assert snap is not None
    assert parse_snapshot(dump_snapshot(snap)) == snap


def test_on_a_release_newer_than_the_newest_known_guard_never_returns_but_still_quarantines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24 item 8: 'return' could free slots a newer SGLang holds where the census never looks."""
    rank = Rank(kv=64, mamba=8, rows=4)
    lost = int(rank.mamba.take())  # no set holds it, the count gap is one: proof enough on 0.5.4
    config = replace(CONFIG, guard=True, release="0.6.0")
    clock = FakeClock()
    with caplog.at_level(logging.WARNING, logger="poolwatch.probe"):
        probe = new_probe(
            SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock,
            release=Release("0.6.0", shape_for_version("0.5.4.post1").family, verified=False),
        )  # fmt: skip
    assert [r for r in caplog.records if "newer than the newest release" in r.message]
    probe.on_idle("self_check_during_idle")
    assert lost not in free_mamba(rank)
    snap = probe.latest
    assert snap is not None
    assert snap.repairs == ()
    assert snap.probe is not None
    assert (snap.probe.guard, snap.probe.guard_return) == (True, False)
    seeded, slot = seed_rank()  # quarantine still runs there
    guarded = new_probe(
        SGLANG, seeded.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock,
        release=Release("0.6.0", shape_for_version("0.5.4.post1").family, verified=False),
    )  # fmt: skip
    guarded.after_prefill_chunk("process_prefill_chunk")
    assert slot not in free_mamba(seeded)


def test_the_newest_known_release_keeps_return_and_says_so() -> None:
    assert known_release(".".join(str(n) for n in NEWEST_RELEASE[:3]))
    assert known_release("0.5.4.post1")
    assert not known_release("0.5.24")
    assert not known_release("1.0.0")
    assert not known_release("nightly")
    probe = probe_for(Rank(kv=64, mamba=8, rows=4), guard=True)
    probe.on_idle("self_check_during_idle")
    assert probe.latest is not None
    assert probe.latest.probe is not None
    assert probe.latest.probe.guard_return

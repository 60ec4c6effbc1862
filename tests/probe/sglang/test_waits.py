"""What waits on an SGLang rank: a PD prefill's finished requests kept for their KV to be read
(``kv_send``) and a decode's requests waiting for remote KV (``kv_recv``), aged from the first sighting,
with SGLang's own bounds from its environment; and the admission stall read from ``forward_ct``.  The
detector pages a send that outlived the bound, naming its owner, and never one within it."""

from __future__ import annotations

from tests.probe.sglang.setups import by_hand

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.stranded import STRANDED_HOLD
from poolwatch.model.holds import HoldReason
from poolwatch.model.rank import Pool
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.waits import pd_timeouts
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import DisaggregationMode, Queue, Rank

CONFIG = by_hand(census_interval_s=60.0)


class _Decode:
    """A decode transfer queue's entry (SGLang's ``DecodeRequest``): the request it carries."""

    def __init__(self, req: object) -> None:
        self.req = req


def prefill_with_inflight(clock: FakeClock, environ: dict[str, str] | None = None) -> tuple[Rank, object]:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.sched.disaggregation_mode = DisaggregationMode("prefill")
    done = rank.running("sent-\x1b[1m", origin=12, outputs=1)
    rank.sched.running_batch.reqs.remove(done)
    rank.sched.last_batch = None
    rank.sched.disagg_prefill_inflight_queue.append(done)
    env = {"POOLWATCH_WORKER": "p0", **(environ or {})}
    return rank, new_probe(SGLANG, rank.sched, CONFIG, environ=env, clock=clock, wall=clock)


def test_sglangs_own_pd_bounds_are_read_from_its_environment() -> None:
    assert pd_timeouts({}) == {
        HoldReason.KV_RECV: (300.0, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"),
        HoldReason.KV_SEND: (
            600.0,
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT + SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
        ),
    }
    bounds = pd_timeouts(
        {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "600", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "x"}
    )
    assert bounds[HoldReason.KV_RECV][0] == 600.0
    assert bounds[HoldReason.KV_SEND][0] == 900.0  # a bad value reads as SGLang's default


def test_a_prefills_inflight_request_is_a_kv_send_hold_aged_from_its_first_sighting() -> None:
    clock = FakeClock()
    rank, probe = prefill_with_inflight(clock)
    first = probe.sample_now()
    clock.advance(100.0)
    snap = probe.sample_now()
    [hold] = snap.holds
    assert (hold.pool, hold.reason, hold.owners, hold.slots) == (Pool.FULL, HoldReason.KV_SEND, 1, 12)
    assert hold.oldest == first.taken_at
    assert hold.timeout == 600.0
    assert hold.named[0].owner == "sent-\u241b[1m"  # inert
    rank.sched.disagg_prefill_inflight_queue.clear()  # the decode read it
    assert probe.sample_now().holds == ()


class FINISH_ABORT:  # SGLang's class name: the probe reads it
    """SGLang's abort finish (``sglang.srt.managers.schedule_batch.FINISH_ABORT``)."""


def test_a_send_aborted_while_it_waits_is_named_aborted_its_slots_as_first_read() -> None:
    clock = FakeClock()
    rank, probe = prefill_with_inflight(clock)
    [req] = rank.sched.disagg_prefill_inflight_queue
    assert [n.aborted for n in probe.sample_now().holds[0].named] == [False]
    req.to_finish = FINISH_ABORT()  # abort_request on a request whose last chunk ran (<= 0.5.19)
    clock.advance(5.0)
    [hold] = probe.sample_now().holds
    assert (hold.slots, [(n.slots, n.aborted) for n in hold.named]) == (12, [(12, True)])
    req.to_finish, req.finished_reason = None, FINISH_ABORT()  # applied: still aborted
    assert [n.aborted for n in probe.sample_now().holds[0].named] == [True]


def test_the_detector_pages_a_send_past_sglangs_bound_naming_it_and_not_before() -> None:
    clock = FakeClock()
    _, probe = prefill_with_inflight(clock)
    detector = Detector(DetectorConfig(), clock)
    fired_at = None
    for i in range(70):
        clock.advance(10.0)
        detector.observe(probe.sample_now())
        mine = [a for a in detector.evaluate() if a.name == STRANDED_HOLD]
        if mine and fired_at is None:
            fired_at, text = i * 10.0, mine[0].annotations["description"]
    assert fired_at is not None
    assert 600.0 + 60.0 <= fired_at <= 680.0  # SGLang's 600 s and the grace
    assert "kv_send" in text
    assert "'sent-\u241b[1m' (12 slots" in text
    assert "SGLANG_DISAGGREGATION_WAITING_TIMEOUT" in text


def test_a_decodes_transfer_queue_is_a_kv_recv_hold() -> None:
    clock = FakeClock()
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.sched.disaggregation_mode = DisaggregationMode("decode")
    waiting_kv = rank.running("recv-1", origin=9, outputs=1)
    rank.sched.running_batch.reqs.remove(waiting_kv)
    rank.sched.last_batch = None
    transfer = Queue()
    transfer.queue = [_Decode(waiting_kv)]
    rank.sched.disagg_decode_transfer_queue = transfer  # type: ignore[attr-defined]
    probe = new_probe(SGLANG, rank.sched, CONFIG, environ={"POOLWATCH_WORKER": "d0"}, clock=clock, wall=clock)
    [hold] = probe.sample_now().holds
    assert (hold.reason, hold.slots, hold.timeout) == (HoldReason.KV_RECV, 9, 300.0)


def test_progress_moves_with_forward_ct_and_a_stall_names_the_head() -> None:
    clock = FakeClock()
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.running("a", origin=10, outputs=2)
    rank.waiting("w1", cow=False)
    rank.sched.forward_ct = 1  # type: ignore[attr-defined]
    probe = new_probe(SGLANG, rank.sched, CONFIG, environ={"POOLWATCH_WORKER": "u0"}, clock=clock, wall=clock)
    probe.sample_now()
    clock.advance(1.0)
    rank.sched.forward_ct = 2  # type: ignore[attr-defined]
    moving = probe.sample_now().progress
    assert moving is not None
    assert (moving.stalled_steps, moving.waiting, moving.preemptions_seen) == (0, 1, False)
    clock.advance(1.0)
    stalled = probe.sample_now().progress
    assert stalled is not None
    assert stalled.stalled_steps >= 1
    assert stalled.head == ("w1",)


class _Node:
    def __init__(self, value: object, lock_ref: int) -> None:
        self.value, self.lock_ref = value, lock_ref


class _HybridNode:
    """A hybrid (Mamba) tree's node: its full-attention lock is ``full_lock_ref``."""

    def __init__(self, value: object, full_lock_ref: int) -> None:
        self.value, self.full_lock_ref = value, full_lock_ref


def test_hicache_nodes_locked_for_a_host_copy_are_tree_lock_holds_without_an_engine_bound() -> None:
    clock = FakeClock()
    rank = Rank(kv=64, mamba=8, rows=4)
    locked, unlocked = rank.cache(6, locked=True), rank.cache(4)
    rank.tree.ongoing_write_through = {7: _Node(locked.value, 1), 8: _HybridNode(unlocked.value, 0)}  # type: ignore[attr-defined]
    rank.tree.ongoing_load_back = {}  # type: ignore[attr-defined]
    probe = new_probe(SGLANG, rank.sched, CONFIG, environ={"POOLWATCH_WORKER": "h0"}, clock=clock, wall=clock)
    snap = probe.sample_now()
    assert snap is not None
    [hold] = snap.holds
    assert (hold.reason, hold.owners, hold.slots, hold.timeout) == (HoldReason.TREE_LOCK, 1, 6, None)
    assert hold.named[0].owner == "node 7"
    rank.tree.ongoing_load_back = {9: _HybridNode(unlocked.value, 2)}  # type: ignore[attr-defined]
    [hold] = probe.sample_now().holds  # type: ignore[union-attr]
    assert (hold.owners, hold.slots) == (2, 10)

"""What waits on a vLLM scheduler, on the stand-in of rigs/fakes/vllm.py: requests kept for a
KV transfer and requests waiting for remote KV as holds (aged, named, bounded by the connector's own
timeouts), a parked scheduler kept fresh by the keepalive, progress and stalls, fruitless
preemptions, and the encoder cache as a pool."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from poolwatch.conservation import Balance, findings
from poolwatch.model.holds import HoldReason
from poolwatch.model.rank import Phase, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.timeouts import connector_timeouts
from rigs.fakes.vllm import Request, Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01)


class Status(enum.Enum):
    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()


@dataclass(eq=False)
class Req(Request):
    status: Status = Status.RUNNING
    num_computed_tokens: int = 0
    last_sched_seq: int = 0
    __hash__ = object.__hash__  # vLLM's requests sit in sets (deferred_waiting)

    def is_finished(self) -> bool:
        return self.status.name.startswith("FINISHED")


class Clocks:
    """The probe's monotonic clock (every read a second later) and a wall clock moved by hand."""

    def __init__(self) -> None:
        self.mono, self.wall = 1e9, 1_800_000_000.0

    def tick(self) -> float:
        self.mono += 1.0
        return self.mono

    def now(self) -> float:
        return self.wall


class Sched(Scheduler):
    """The stand-in with statuses, ``finished_req_ids`` and the blocked queue of 0.31+."""

    def __init__(self, n: int = 64) -> None:
        super().__init__(n)
        self.finished_req_ids: set[str] = set()
        self.deferred_waiting: set[Any] = set()

    def admit(self, rid: str, blocks: int) -> Req:
        self.add(rid, blocks)
        req = self.requests[rid] = Req(rid)
        self.running[-1] = req
        return req

    def end(self, rid: str, *, keep: bool = False, status: Status = Status.FINISHED_LENGTH_CAPPED) -> None:
        req = self.requests[rid]
        assert isinstance(req, Req)
        req.status = status
        self.finish(rid, keep_for_transfer=keep)
        self.finished_req_ids.add(rid)


def probe_for(sched: Sched, clocks: Clocks, version: str = "0.34.0", **environ: str) -> VllmProbe:
    env = {"POOLWATCH_WORKER": "w", **environ}
    return new_probe(
        VLLM, sched, CONFIG, release=vllm_release(version), environ=env, clock=clocks.tick, wall=clocks.now
    )


def sample(probe: VllmProbe) -> Snapshot:
    snap = probe.sample_now()
    assert snap is not None
    return snap


def step(probe: VllmProbe, sched: Sched) -> None:
    """One engine step as the hooks see it: before schedule, after update."""
    probe.on_step("schedule")
    sched.finished_req_ids = set()  # schedule() clears it
    for r in sched.running:
        assert isinstance(r, Req)
        r.num_computed_tokens += 1
    probe.after_update("update_from_output")


def test_a_request_kept_for_a_transfer_is_a_kv_send_hold_that_ages_and_ends_when_freed() -> None:
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks)
    sched.admit("a", 3)
    sched.admit("p1", 7)
    step(probe, sched)
    sched.end("p1", keep=True)  # the connector answered delay_free
    probe.after_update("update_from_output")
    start = clocks.wall
    sample(probe)  # first seen kept
    clocks.wall += 45.0
    snap = sample(probe)
    [hold] = snap.holds
    assert (hold.pool, hold.reason, hold.slots, hold.owners) == (Pool.FULL, HoldReason.KV_SEND, 7, 1)
    assert hold.age(snap.taken_at) == 45.0
    assert hold.named[0].owner == "p1"
    assert hold.named[0].since == start
    assert hold.timeout is None  # no connector with a bound of its own
    assert snap.pools[Pool.FULL].session_held is not None
    for m in sched.managers:  # the connector reports the KV sent: vLLM frees it
        m.free("p1")
    del sched.requests["p1"]
    assert sample(probe).holds == ()


def test_a_request_waiting_for_remote_kv_and_one_aborted_while_waiting_are_kv_recv_holds() -> None:
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks)
    b = sched.admit("B", 7)
    sched.running.remove(b)
    b.status = Status.WAITING_FOR_REMOTE_KVS
    sched.kv_holding_waiting.append(b)
    sched.deferred_waiting.add(b)
    snap = sample(probe)
    [hold] = snap.holds
    assert (hold.reason, hold.slots, hold.named[0].owner, hold.named[0].aborted) == (
        HoldReason.KV_RECV,
        7,
        "B",
        False,
    )
    since = hold.oldest
    clocks.wall += 100.0
    # the client disconnects: vLLM keeps B (0.34: in _aborted_kv_loads) until the worker reports it
    sched.kv_holding_waiting.remove(b)
    sched.deferred_waiting.discard(b)
    b.status = Status.FINISHED_ABORTED
    sched.finished_req_ids.add("B")
    probe.after_update("finish_requests")
    [hold] = sample(probe).holds
    assert (hold.reason, hold.named[0].aborted, hold.oldest) == (HoldReason.KV_RECV, True, since)


def test_an_older_release_tells_an_aborted_receive_from_what_the_probe_saw() -> None:
    sched, clocks = Sched(), Clocks()
    del sched.deferred_waiting  # 0.18 - 0.30: blocked requests wait in skipped_waiting
    probe = probe_for(sched, clocks, version="0.26.0")
    b = sched.admit("B", 5)
    sched.running.remove(b)
    b.status = Status.WAITING_FOR_REMOTE_KVS
    sched.skipped_waiting.append(b)
    assert [h.reason for h in sample(probe).holds] == [HoldReason.KV_RECV]
    sched.skipped_waiting.remove(b)
    b.status = Status.FINISHED_ABORTED
    sched.finished_req_ids.add("B")
    probe.after_update("finish_requests")
    [hold] = sample(probe).holds
    assert (hold.reason, hold.named[0].aborted) == (HoldReason.KV_RECV, True)


def test_a_parked_scheduler_is_sampled_at_once_and_its_snapshot_kept_fresh_while_its_hold_ages() -> None:
    """vLLM up to 0.21 stops stepping when only requests kept for a transfer are left (#43433)."""
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks, version="0.21.0", VLLM_NIXL_ABORT_REQUEST_TIMEOUT="120")
    sched.connector = type("NixlConnector", (), {"connector_scheduler": object()})()
    probe.reader.waits.timeouts = connector_timeouts(sched, probe.environ)
    sched.admit("P1", 7)
    step(probe, sched)
    sched.end("P1", keep=True)
    probe.after_update("update_from_output")  # the last hook before the engine idles
    snap = probe.latest
    assert snap is not None
    assert snap.phase is Phase.BUSY
    [hold] = snap.holds
    assert (hold.reason, hold.timeout, hold.source) == (
        HoldReason.KV_SEND,
        120.0,
        "VLLM_NIXL_ABORT_REQUEST_TIMEOUT",
    )
    clocks.wall += 600.0
    clocks.mono += 5.0  # no hook for a while
    assert probe.refresh_idle()
    later = probe.latest
    assert later is not None
    assert later.holds[0].age(later.taken_at) == 600.0


def test_connector_bounds_by_release_and_role() -> None:
    side = type("Side", (), {"_kv_lease_duration": 30, "decoder_kv_blocks_ttl": 480})()
    sched = Sched()
    sched.connector = type("NixlConnector", (), {"connector_scheduler": side})()
    assert connector_timeouts(sched, {}) == {
        HoldReason.KV_SEND: (30.0, "kv_lease_duration"),
        HoldReason.KV_RECV: (480.0, "decoder_kv_blocks_ttl"),
    }
    sched.vllm_config = type("C", (), {"kv_transfer_config": type("K", (), {"kv_role": "kv_consumer"})()})()
    assert connector_timeouts(sched, {})[HoldReason.KV_SEND] == (480.0, "decoder_kv_blocks_ttl")
    sched.connector = type("NixlConnector", (), {"connector_scheduler": object()})()  # up to 0.21
    assert connector_timeouts(sched, {})[HoldReason.KV_RECV] == (480.0, "VLLM_NIXL_ABORT_REQUEST_TIMEOUT")
    multi = type("MultiConnector", (), {"_connectors": [type("LMCacheConnectorV1", (), {})()]})()
    sched.connector = multi
    assert connector_timeouts(sched, {}) == {}


def test_progress_counts_admissions_and_a_stall_needs_admittable_requests_and_no_move() -> None:
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks)
    sched.admit("a", 2)
    sample(probe)
    sched.admit("b", 2)
    step(probe, sched)
    first = sample(probe).progress
    assert first is not None
    assert (first.admitted, first.stalled_steps) == (1, 0)
    for r in list(sched.running):  # everything stops: two requests wait, nothing runs
        sched.running.remove(r)
        sched.waiting.append(r)
    sample(probe)
    for _ in range(5):
        probe.on_step("schedule")
    p = sample(probe).progress
    assert p is not None
    assert p.waiting == 2
    assert p.stalled_steps == 5
    assert p.head == ("a", "b")
    blocked = sched.waiting[0]
    sched.deferred_waiting.add(blocked)
    sched.deferred_waiting.add(sched.waiting[1])  # both wait for remote KV: nothing admittable
    p = sample(probe).progress
    assert p is not None
    assert (p.waiting, p.stalled_steps) == (0, 0)


def test_a_preemption_whose_victim_is_fenced_is_fruitless() -> None:
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks)
    probe.start()
    sched.defer_block_free, sched.processed_step_seq = True, 10
    victim = sched.admit("R4", 3)
    victim.last_sched_seq = 11  # listed by the step still in flight
    other = sched.admit("R5", 3)
    other.last_sched_seq = 10
    probe.on_step("schedule")
    for rid in ("R4", "R5"):
        for m in sched.managers:
            m.pop_blocks_for_free(rid)  # vLLM's _preempt_request, the status still RUNNING
    p = sample(probe).progress
    assert p is not None
    assert (p.preempted, p.fruitless) == (2, 1)
    assert [v for _, v in p.recent] == ["R4"]


def test_the_encoder_caches_free_count_is_witnessed_against_its_census_never_paged_a_surplus() -> None:
    """``num_free_slots`` is a counter: credited again at a decode step (PR #51228) it is a counter
    witness (the cache's size bounds it), and the pool's figures are the census's -- no surplus."""
    sched, clocks = Sched(), Clocks()
    sched.encoder_cache_manager = type(
        "EncoderDecoderCacheManager", (), {"cache_size": 2048, "num_free_slots": 2048}
    )()
    probe = probe_for(sched, clocks)
    sched.admit("w", 2)
    assert findings(sample(probe))[Pool.ENCODER].balance is Balance.UNKNOWN  # busy, coarse: no proof
    assert sample(probe).witnesses == ()
    sched.encoder_cache_manager.num_free_slots = 3548
    snap = sample(probe)
    assert [(w.pool, w.figure, w.reported, w.census) for w in snap.witnesses] == [
        (Pool.ENCODER, "available", 3548, 2048)
    ]
    assert snap.pools[Pool.ENCODER].available == 2048  # the census's figure
    assert findings(snap)[Pool.ENCODER].balance is not Balance.SURPLUS
    mm = type("EncoderCacheManager", (), {"cache_size": 4096, "num_free_slots": 1000})()
    mm.num_embeds_by_hash = {"img-1": 3000}  # the multimodal manager keeps each entry's size
    sched.encoder_cache_manager = mm
    assert [(w.reported, w.census) for w in sample(probe).witnesses] == [(1000, 1096)]
    mm.num_free_slots = 1096
    assert sample(probe).witnesses == ()
    sched.encoder_cache_manager = type("EncoderCacheManager", (), {"cache_size": 0, "num_free_slots": 0})()
    assert Pool.ENCODER not in sample(probe).pools  # a text-only model has no cache


def test_an_owner_id_a_client_sent_lands_inert() -> None:
    sched, clocks = Sched(), Clocks()
    probe = probe_for(sched, clocks)
    rid = "chatcmpl-\n[FIRING] forged\x1b[31m" + "x" * 200
    sched.admit(rid, 2)
    sched.end(rid, keep=True)
    probe.after_update("update_from_output")
    [hold] = sample(probe).holds
    owner = hold.named[0].owner
    assert owner.isprintable()
    assert len(owner) == 64
    assert owner.startswith("chatcmpl-\u240a[FIRING] forged\u241b[31m")  # poolwatch.inert's signs


class Unread(Req):
    """A request whose computed tokens must not be read (the outputs say what moved)."""

    @property  # type: ignore[override]
    def num_computed_tokens(self) -> int:
        raise AssertionError("num_computed_tokens read")

    @num_computed_tokens.setter
    def num_computed_tokens(self, value: int) -> None:
        pass


class Told(Sched):
    """A stand-in whose ``schedule`` returns an output with its scheduled tokens, as vLLM's does."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = 0

    def schedule(self) -> Any:  # type: ignore[override]
        super().schedule()
        return type("SchedulerOutput", (), {"total_num_scheduled_tokens": self.tokens})()


def test_progress_is_told_by_each_schedule_output_and_no_request_is_read_for_it() -> None:
    sched, clocks = Told(), Clocks()
    probe = probe_for(sched, clocks)
    probe.start()  # wraps schedule: each output's scheduled tokens are counted
    for rid in ("a", "b"):
        sched.admit(rid, 2)
        sched.requests[rid] = sched.running[-1] = Unread(rid)
    waiting = Unread("w")
    sched.requests["w"], sched.waiting = waiting, [waiting]  # admittable, never admitted
    sched.schedule()  # the first output: from now on the outputs say what moved
    sample(probe)
    for tokens, stalled in ((2, False), (0, True), (0, True), (1, False)):
        sched.tokens = tokens
        sched.schedule()
        snap = sample(probe)
        assert snap.progress is not None
        assert (snap.progress.admitted, snap.progress.stalled_steps > 0) == (2, stalled)
        assert snap.probe.errors_total == 0  # no request's computed tokens read
    assert probe.reader.waits.moves.told


def test_a_due_sample_is_taken_at_the_steps_end_and_before_schedule_only_when_that_never_came() -> None:
    sched, now = Sched(), [1e9]
    config = ProbeConfig(serve=False, sample_interval_s=1.0)
    env = {"POOLWATCH_WORKER": "w"}
    probe = new_probe(VLLM, sched, config, release=vllm_release("0.34.0"), environ=env, clock=lambda: now[0])
    assert isinstance(probe, VllmProbe)
    sched.admit("a", 2)
    first = sample(probe)
    now[0] += 1.5  # the interval passed during the GPU wait
    probe.on_step("schedule")
    assert probe.latest is first  # left to the step's end, where vLLM just touched what it reads
    probe.after_update("update_from_output")
    taken = probe.latest
    assert taken is not None
    assert taken is not first
    assert taken.seq == probe.seq
    now[0] += 2.5  # no step's end came for a whole interval more (a step that raised, say)
    probe.on_step("schedule")
    assert probe.latest is not taken

"""Freed while in flight (rigs/fakes/vllm.py, stepped as EngineCore's batch queue steps it):
a block returned to the pool while a step that lists it is in flight, beside a KV consumer connector,
is named at the free with its request (``freed_in_flight``), never as a double free; a release that
fences the free behind the step (0.24+'s deferred frees), a scheduler without a consumer connector,
and blocks another request still shares name nothing."""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from poolwatch.model.findings import TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.in_flight import InFlight, unordered_writer
from rigs.fakes.vllm import Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-flight")


class ExampleConnector:
    """Stands for a KV connector (only its class name is read)."""


@dataclass
class TransferConfig:
    is_kv_consumer: bool = True


@dataclass
class Output:
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())


class Overlapping(Scheduler):
    """Async scheduling beside a connector: ``fenced`` frees as 0.24+ does (a request whose last step
    is in flight is popped onto ``deferred_frees`` and returned once that step's output is applied),
    else as 0.23 and earlier (at once)."""

    def __init__(self, *, fenced: bool, consumer: bool = True) -> None:
        super().__init__(64)
        self.fenced = fenced
        self.connector = ExampleConnector()
        self.vllm_config = type("VllmConfig", (), {"kv_transfer_config": TransferConfig(consumer)})()
        self.scheduled_seq = self.processed_seq = 0
        self.last_sched: dict[str, int] = {}

    def schedule(self) -> Any:  # type: ignore[override]
        super().schedule()
        listed = {r.request_id: 1 for r in self.running}
        if listed:
            self.scheduled_seq += 1
            self.last_sched.update(dict.fromkeys(listed, self.scheduled_seq))
        return Output(listed)

    def update_from_output(self, output: Any = None) -> None:  # type: ignore[override]
        if output is not None and output.total_num_scheduled_tokens:
            self.processed_seq += 1
        while self.deferred_frees and self.deferred_frees[0][0] <= self.processed_seq:
            self.pool.free_blocks(reversed(self.deferred_frees.popleft()[1]))

    def finish(self, rid: str, *, keep_for_transfer: bool = False) -> None:
        if not self.fenced or self.last_sched.get(rid, 0) <= self.processed_seq:
            super().finish(rid, keep_for_transfer=keep_for_transfer)
            return
        self.requests[rid].finished = True
        self.running = [r for r in self.running if r.request_id != rid]
        for m in self.managers:
            self.deferred_frees.append((self.scheduled_seq, m.pop_blocks_for_free(rid)))
        del self.requests[rid]


def attached(
    sched: Scheduler, made: list[Scheduler], release: str = "0.23.0", config: ProbeConfig = CONFIG
) -> VllmProbe:
    made.append(sched)
    probe = attach(VLLM, sched, config, release=vllm_release(release))
    assert isinstance(probe, VllmProbe)
    return probe


def found(probe: VllmProbe) -> dict[TripwireKind, tuple[tuple[int, ...], tuple[str, ...]]]:
    snap = probe.latest
    return {t.kind: (t.slots, t.requests) for t in (snap.tripwires if snap else ())}


def test_a_request_finished_while_its_next_step_is_in_flight_is_named_at_the_free(
    made: list[Scheduler],
) -> None:
    sched = Overlapping(fenced=False)
    probe = attached(sched, made)
    blocks = sched.add("a", 3)
    sched.add("b", 2)
    pending: deque[Any] = deque([sched.schedule()])  # step 1 in flight
    pending.append(sched.schedule())  # step 2 scheduled before step 1's output is applied
    sched.update_from_output(pending.popleft())  # step 1 applied: "a" finishes in it ...
    sched.finish("a")  # ... and its blocks go back while step 2, which lists "a", is in flight
    ids = tuple(sorted(b.block_id for b in blocks))
    assert found(probe) == {TripwireKind.FREED_IN_FLIGHT: (ids, ("a",))}
    trip = next(t for t in probe.latest.tripwires) if probe.latest else None
    assert trip is not None
    assert trip.first_seen_hook == "free_blocks"


def test_the_fenced_release_defers_the_same_free_and_names_nothing(made: list[Scheduler]) -> None:
    sched = Overlapping(fenced=True)
    probe = attached(sched, made, "0.33.0")
    sched.add("a", 3)
    sched.add("b", 2)
    pending: deque[Any] = deque([sched.schedule(), sched.schedule()])
    sched.update_from_output(pending.popleft())
    sched.finish("a")  # popped onto deferred_frees: step 2 still lists it
    assert sched.deferred_frees
    sched.update_from_output(pending.popleft())  # step 2 applied: the fence drains the blocks now
    assert not sched.deferred_frees
    assert found(probe) == {}


def test_a_long_overlapped_run_names_nothing_when_fenced_and_every_early_free_when_not(
    made: list[Scheduler],
) -> None:
    def run(fenced: bool) -> tuple[int, set[str]]:
        sched = Overlapping(fenced=fenced)
        probe = attached(sched, made, "0.33.0" if fenced else "0.23.0")
        pending: deque[Any] = deque()
        early: set[str] = set()
        for step in range(60):
            shared = sched.add(f"p{step}", 2)
            sched.add(f"q{step}", 1, prefix=shared)  # a shared prefix: q keeps p's blocks
            pending.append(sched.schedule())
            if len(pending) == 2:
                sched.update_from_output(pending.popleft())
            sched.finish(f"p{step}")  # its own blocks are shared: one reference goes, none returns
            if step % 2:
                sched.finish(f"q{step}")  # q's step is in flight
                early.add(f"q{step}")
            elif f"q{step - 2}" in sched.requests:
                sched.finish(f"q{step - 2}")
        while pending:
            sched.update_from_output(pending.popleft())
        trips = list(probe.latest.tripwires if probe.latest else ())
        assert all(t.kind is TripwireKind.FREED_IN_FLIGHT for t in trips)
        return sum(t.count for t in trips), {r for t in trips for r in t.requests}

    assert run(fenced=True) == (0, set())
    count, named = run(fenced=False)
    assert count > 0
    assert named
    assert named <= {f"q{s}" for s in range(60)} | {f"p{s}" for s in range(60)}


def test_a_free_guard_refuses_is_not_judged_as_freed_in_flight(made: list[Scheduler]) -> None:
    """Guard refuses an early free of blocks a deferred entry still owns (0.33.0's
    guard_deferred_freed_early): the refused part never reaches the pool, so it is no early free;
    the fence's own drain later returns the blocks once, and nothing is named."""
    sched = Overlapping(fenced=True)
    probe = attached(sched, made, "0.33.0", replace(CONFIG, guard=True))
    sched.add("a", 3)
    sched.add("b", 2)
    pending: deque[Any] = deque([sched.schedule(), sched.schedule()])
    sched.update_from_output(pending.popleft())
    sched.finish("a")  # popped onto deferred_frees while step 2 lists it
    blocks = sched.deferred_frees[0][1]
    sched.pool.free_blocks(list(reversed(blocks)))  # the early free: refused whole
    assert {s for r in probe.repairs.all() for s in r.slots} == {b.block_id for b in blocks}
    assert found(probe) == {}
    sched.update_from_output(pending.popleft())  # the drain: the one free of these blocks
    assert not sched.deferred_frees
    assert found(probe) == {}


def test_without_a_consumer_connector_nothing_is_armed(made: list[Scheduler]) -> None:
    producer = Overlapping(fenced=False, consumer=False)
    probe = attached(producer, made)
    assert unordered_writer(producer) is None
    assert probe.in_flight is None
    # over schedule's hook only the waits' count of the tokens each output schedules, no step in flight
    assert isinstance(vars(producer)["schedule"].__wrapped__, functools.partial)
    plain = Scheduler(16)
    assert unordered_writer(plain) is None


def test_detach_gives_the_schedulers_methods_back(made: list[Scheduler]) -> None:
    sched = Overlapping(fenced=False)
    attached(sched, made)
    assert not isinstance(vars(sched)["schedule"], functools.partial)  # the step wrapper over the hook
    made.clear()
    detach(sched)
    assert "schedule" not in vars(sched)
    assert "update_from_output" not in vars(sched)
    assert sched.schedule().num_scheduled_tokens == {}


def test_the_tracker_forgets_a_step_once_its_output_is_applied() -> None:
    flight = InFlight("ExampleConnector")
    one, two = Output({"a": 1}), Output({"a": 1, "b": 1})
    flight.scheduled(one)
    flight.scheduled(two)
    flight.scheduled(Output({}))  # an empty step is never in flight
    assert [s for s, _, _ in flight.steps] == [1, 2]
    blocks = [type("B", (), {"block_id": 5, "is_null": False})()]
    flight.popped("a", blocks)
    assert flight.step_of(5) == 2
    flight.applying(one)
    assert flight.step_of(5) == 2  # step 2 still lists "a"
    flight.applying(two)
    assert flight.kept == {}
    assert not flight.steps
    flight.applying(Output({"x": 1}))  # an output it never saw: nothing moves

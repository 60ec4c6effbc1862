"""Freed while a rollback still needs it (rigs/fakes/vllm.py, stepped as EngineCore's batch
queue steps it): with speculative decoding and overlapping steps, a sliding window's block dropped on
a count that includes drafts still in flight is named before the drop with its request
(``freed_in_flight``, hook ``remove_skipped_blocks``); a drop on the processed count, a synchronous
scheduler, a scheduler without drafts and a manager with its own drop rule name nothing."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from poolwatch.model.findings import TripwireKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.in_flight import InFlight
from poolwatch.probe.vllm.rollback import rolled_back, speculative, windowed
from rigs.fakes.vllm import Block, FullAttentionManager, Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-rollback")
BLOCK, WINDOW, DRAFTS = 4, 8, 3


@dataclass
class SingleTypeKVCacheManager(FullAttentionManager):
    """vLLM's base rule: drop the blocks wholly below ``get_num_skipped_tokens`` (nulled, freed)."""

    block_size: int = BLOCK

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return 0

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        blocks = self.req_to_blocks[request_id]
        n = min(self.get_num_skipped_tokens(total_computed_tokens) // self.block_size, len(blocks))
        dropped = [b for b in blocks[:n] if not b.is_null]
        for i in range(n):
            blocks[i] = self.block_pool.null_block
        self.block_pool.free_blocks(dropped)


@dataclass
class SlidingWindowManager(SingleTypeKVCacheManager):
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - WINDOW + 1)


@dataclass
class MambaManager(SingleTypeKVCacheManager):
    """A drop rule of its own (vLLM's Mamba manager already allows for the drafts)."""

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - 1)

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        super().remove_skipped_blocks(request_id, max(0, total_computed_tokens - DRAFTS))


@dataclass
class Output:
    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    total_num_scheduled_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())


class Drafting(Scheduler):
    """A full-attention and a sliding-window group; each step schedules one token and ``DRAFTS``
    drafts per running request and drops the window's head first -- on the optimistic count (0.25
    and earlier) or on the processed one (``processed``: 0.26+) -- and the worker rejects every draft."""

    def __init__(self, *, processed: bool, drafts: int = DRAFTS) -> None:
        super().__init__(256)
        pool = self.pool
        managers = (SingleTypeKVCacheManager(pool), SlidingWindowManager(pool))
        self.kv_cache_manager.coordinator.single_type_managers = managers
        self.processed, self.num_spec_tokens = processed, drafts
        self.in_flight: dict[str, int] = {}

    def admit(self, rid: str, tokens: int) -> None:
        self.add(rid, 0)
        self.requests[rid].num_computed_tokens = tokens
        self._grow(rid, tokens)

    def _grow(self, rid: str, tokens: int) -> None:
        for m in self.managers:
            held = m.req_to_blocks[rid]
            need = -(-tokens // BLOCK) - len(held)
            held.extend(self.pool.get_new_blocks(max(0, need)))

    def schedule(self) -> Any:  # type: ignore[override]
        super().schedule()
        listed, spec = {}, {}
        for r in self.running:
            rid, now = r.request_id, r.num_computed_tokens
            count = now - self.in_flight.get(rid, 0) if self.processed else now
            for m in self.managers:
                m.remove_skipped_blocks(rid, count)  # type: ignore[attr-defined]
            listed[rid] = 1 + self.num_spec_tokens
            spec[rid] = [9] * self.num_spec_tokens
            r.num_computed_tokens += listed[rid]
            self.in_flight[rid] = self.in_flight.get(rid, 0) + listed[rid]
            self._grow(rid, r.num_computed_tokens)
        return Output(listed, spec)

    def update_from_output(self, output: Any = None) -> None:  # type: ignore[override]
        for rid, n in output.num_scheduled_tokens.items():
            self.in_flight[rid] -= n
            self.requests[rid].num_computed_tokens -= len(output.scheduled_spec_decode_tokens.get(rid, ()))


def attached(sched: Scheduler, made: list[Scheduler], release: str) -> VllmProbe:
    made.append(sched)
    probe = attach(VLLM, sched, CONFIG, release=vllm_release(release))
    assert isinstance(probe, VllmProbe)
    return probe


def run(sched: Drafting, steps: int, depth: int = 2) -> None:
    pending: deque[Any] = deque()
    for _ in range(steps):
        pending.append(sched.schedule())
        if len(pending) >= depth:
            sched.update_from_output(pending.popleft())
    while pending:
        sched.update_from_output(pending.popleft())


def trips(probe: VllmProbe) -> list[Any]:
    return [
        t for t in (probe.latest.tripwires if probe.latest else ()) if t.kind is TripwireKind.FREED_IN_FLIGHT
    ]


def test_a_window_block_dropped_on_a_count_with_drafts_in_flight_is_named_before_the_drop(
    made: list[Scheduler],
) -> None:
    sched = Drafting(processed=False)
    probe = attached(sched, made, "0.25.1")
    sched.admit("r", 9)
    window = sched.managers[1]
    first = window.req_to_blocks["r"][0]
    sched.schedule()  # step 1 in flight: r counts 13, 3 of them drafts
    assert trips(probe) == []
    listed_before = list(window.req_to_blocks["r"])
    sched.schedule()  # drops block 0 on 13 (tokens 0-5 left the window) though a rollback to 10 needs 3
    found = trips(probe)
    assert [(t.slots, t.requests, t.first_seen_hook) for t in found] == [
        ((first.block_id,), ("r",), "remove_skipped_blocks")
    ]
    assert listed_before[0] is first
    assert window.req_to_blocks["r"][0].is_null  # named before the drop, which still happened


def test_a_drop_on_the_processed_count_names_nothing_over_a_long_run(made: list[Scheduler]) -> None:
    sched = Drafting(processed=True)
    probe = attached(sched, made, "0.26.0")
    for i, tokens in enumerate((9, 10, 11, 12)):
        sched.admit(f"r{i}", tokens)
    run(sched, 40)
    assert trips(probe) == []
    assert any(b.is_null for b in sched.managers[1].req_to_blocks["r0"])  # the window did drop blocks


def test_the_optimistic_count_names_every_request_it_drops_early_over_a_long_run(
    made: list[Scheduler],
) -> None:
    sched = Drafting(processed=False)
    probe = attached(sched, made, "0.25.1")
    for i, tokens in enumerate((9, 10, 11, 12)):
        sched.admit(f"r{i}", tokens)
    run(sched, 40)
    named = {r for t in trips(probe) for r in t.requests}
    assert named == {"r0", "r1", "r2", "r3"}


def test_a_synchronous_scheduler_and_one_without_drafts_name_nothing(made: list[Scheduler]) -> None:
    sync = Drafting(processed=False)
    probe = attached(sync, made, "0.25.1")
    sync.admit("r", 9)
    run(sync, 30, depth=1)  # each output applied before the next schedule: no step in flight
    assert trips(probe) == []
    plain = Drafting(processed=False, drafts=0)
    probe = attached(plain, made, "0.25.1")
    assert not speculative(plain)
    assert probe.in_flight is None  # nothing armed: no drafts, no consumer connector
    assert "remove_skipped_blocks" not in vars(plain.managers[1])


def test_only_managers_dropping_by_the_base_rule_with_a_count_of_their_own_are_watched() -> None:
    pool = Scheduler(8).pool
    full, window, mamba = SingleTypeKVCacheManager(pool), SlidingWindowManager(pool), MambaManager(pool)
    assert windowed([full, window, mamba, FullAttentionManager(pool), object()]) == [window]


def test_the_floor_is_the_requests_count_less_the_drafts_in_flight() -> None:
    pool = Scheduler(16).pool
    window = SlidingWindowManager(pool)
    window.req_to_blocks["r"] = blocks = pool.get_new_blocks(4)
    flight = InFlight(None)
    request = type("Request", (), {"num_computed_tokens": 13})()
    assert rolled_back(window, flight, {"r": request}, "r", 13) == ()  # no step in flight: no drafts
    flight.scheduled(Output({"r": 4}, {"r": [9, 9, 9]}))
    assert flight.drafts("r") == 3
    assert rolled_back(window, flight, {"r": request}, "r", 13) == (blocks[0].block_id,)
    assert rolled_back(window, flight, {"r": request}, "r", 9) == ()  # the processed count: nothing
    assert rolled_back(window, flight, {}, "r", 13) == ()  # a request it does not know: nothing
    blocks[0] = Block(99, is_null=True)
    assert rolled_back(window, flight, {"r": request}, "r", 13) == ()  # already dropped
    flight.popped("r", blocks)  # no unordered writer: popped blocks are not kept
    assert flight.kept == {}

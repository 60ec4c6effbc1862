"""What differs between vLLM's release families, on the block-pool stand-in: the shape check that
refuses a scheduler whose fields changed, an unverified release read coarse until its first idle walk
balances, the DP rank of 0.14+, sink blocks reserved, deferred frees of another pool, tail pins."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, Pool, Role
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.shape_check import check_shape
from poolwatch.probe.vllm.shapes import SHAPES, shape_for
from rigs.fakes.vllm import Block, Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01, directory="/nonexistent-poolwatch-families")


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    s = Scheduler(64)
    yield s
    detach(s)


def attached(sched: Any, version: str = "0.33.0") -> VllmProbe:
    probe = attach(VLLM, sched, CONFIG, release=vllm_release(version))
    assert isinstance(probe, VllmProbe)
    return probe


# --- the shape check --------------------------------------------------------------------------------


def test_the_stand_in_passes_the_shape_check_of_its_family() -> None:
    assert check_shape(Scheduler(16), shape_for("0.33.0")) == ()


class PropertyRef(Block):
    @property
    def ref_cnt(self) -> int:  # type: ignore[override]
        return 1

    @ref_cnt.setter
    def ref_cnt(self, value: int) -> None:
        pass


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda s: delattr(s, "requests"), "requests: missing"),
        (lambda s: delattr(s, "kv_holding_waiting"), "kv_holding_waiting: missing or not a queue"),
        (lambda s: delattr(s, "deferred_frees"), "deferred_frees: missing or not a queue"),
        (lambda s: setattr(s.pool, "num_gpu_blocks", "64"), "num_gpu_blocks: a str, not int"),
        (lambda s: s.pool.blocks.append(Block(64)), "blocks: 65 of them, not num_gpu_blocks"),
        (
            lambda s: setattr(s.pool, "null_block", s.pool.blocks[5]),
            "null_block: not blocks[0] marked is_null",
        ),
        (lambda s: s.pool.blocks.__setitem__(-1, PropertyRef(63)), "ref_cnt: a property, not a plain field"),
        (lambda s: setattr(s.managers[0], "req_to_blocks", []), "req_to_blocks: missing or not a mapping"),
    ],
)
def test_a_field_missing_or_changed_is_named(damage: Any, problem: str) -> None:
    sched = Scheduler(64)
    damage(sched)
    problems = check_shape(sched, shape_for("0.33.0"))
    assert any(problem in p for p in problems), problems


def test_a_scheduler_failing_the_shape_check_is_refused_visibly_and_left_alone(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    del sched.kv_holding_waiting
    with caplog.at_level(logging.ERROR, logger="poolwatch.probe"):
        probe = attached(sched)
    assert probe.disabled
    assert "refused on this scheduler" in caplog.text
    assert "kv_holding_waiting" in probe.guard.last_error
    assert "free_blocks" not in vars(sched.pool)  # nothing wrapped
    sched.add("a", 2)
    sched.schedule()  # the hooks run, nothing is read
    assert probe.guard.samples_total == 0


# --- an unverified release ----------------------------------------------------------------------------


def test_an_unverified_release_is_coarse_until_its_first_idle_walk_balances(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    sched.async_kv_waiting = []  # type: ignore[attr-defined]  # v0.34's queues
    with caplog.at_level(logging.WARNING, logger="poolwatch.probe"):
        probe = attached(sched, "0.35.0")  # newer than the newest read: read as v0.34
    assert "0.35.0 is a release poolwatch has not read" in caplog.text
    snap = probe.latest
    assert snap is not None
    assert snap.worker.release == "0.35.0"
    assert snap.worker.release_verified is False
    assert probe.reader.trusted  # attached idle: the first idle walk balanced at once
    sched.add("a", 2)
    busy = probe.sample_now()
    assert busy is not None
    assert busy.pools[Pool.FULL].exactness is Exactness.EXACT


def test_an_unverified_release_whose_first_idle_walk_does_not_balance_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched = Scheduler(64)
    sched.async_kv_waiting = []  # type: ignore[attr-defined]  # v0.34's queues
    sched.pool.get_new_blocks(3)  # three blocks counted and owned by no one before the probe came
    try:
        with caplog.at_level(logging.ERROR, logger="poolwatch.probe"):
            probe = attached(sched, "0.35.0")
        assert probe.disabled
        assert "first idle census did not balance" in probe.guard.last_error
        assert probe.latest is not None
        assert probe.latest.pools == {}  # nothing published from a release that did not check out
    finally:
        detach(sched)


def test_a_verified_release_is_exact_from_the_start(sched: Scheduler) -> None:
    probe = attached(sched)
    assert probe.latest is not None
    assert probe.latest.worker.release_verified is True
    assert probe.latest.pools[Pool.FULL].exactness is Exactness.EXACT


# --- family by family -----------------------------------------------------------------------------------


def test_from_0_14_a_dense_models_dp_engines_are_told_apart_by_data_parallel_index() -> None:
    parallel = type(
        "P", (), {"data_parallel_rank": 0, "data_parallel_index": 3, "data_parallel_rank_local": None}
    )()
    config = type("C", (), {"parallel_config": parallel, "model_config": None})()
    for version, rank in (("0.13.0", 0), ("0.14.0", 3), ("0.34.0", 3)):
        sched = Scheduler(16)
        sched.vllm_config = config  # type: ignore[attr-defined]
        probe = new_probe(VLLM, sched, CONFIG, release=vllm_release(version))
        assert probe.worker(Role.UNIFIED, Reading()).dp_rank == rank, version
        assert probe.reader.local_index(Reading()) == rank


def test_sink_blocks_are_reserved_not_leaked_where_the_family_has_them() -> None:
    for version, reserved in (("0.14.0", True), ("0.29.0", True), ("0.30.0", False)):
        sched = Scheduler(64)
        sink = type("SinkFullAttentionManager", (), {})()
        sink.block_pool, sink.req_to_blocks = sched.pool, {}
        sink.sink_blocks = [sched.pool.free_block_queue.popleft() for _ in range(2)]  # off the queue at 0
        sched.kv_cache_manager.coordinator.single_type_managers = (*sched.managers, sink)
        probe = new_probe(VLLM, sched, CONFIG, release=vllm_release(version))
        snap = probe.sample_now(census=True)
        assert snap is not None
        assert (gap(snap.pools[Pool.FULL]) == 0) is reserved, version
        assert (snap.tripwires == ()) is reserved, version


def test_deferred_frees_own_their_blocks_and_another_pools_blocks_are_not_counted() -> None:
    sched = Scheduler(64)
    probe = new_probe(VLLM, sched, CONFIG, release=vllm_release("0.33.0"))
    blocks = sched.add("a", 3)
    sched.managers[0].req_to_blocks.pop("a")
    del sched.requests["a"]
    sched.running.clear()
    elsewhere = Block(7)
    elsewhere.pool = object()  # type: ignore[attr-defined]  # a HiSparse host pool's block
    for b in blocks:
        b.pool = sched.pool  # type: ignore[attr-defined]
    sched.deferred_frees = deque([(5, [*blocks, elsewhere])])
    snap = probe.sample_now(census=True)
    assert snap is not None
    assert snap.pools[Pool.FULL].held == 3
    assert gap(snap.pools[Pool.FULL]) == 0
    assert snap.tripwires == ()


def test_partial_tail_pins_own_their_blocks_in_0_27_and_0_28_only() -> None:
    for version, owned in (("0.27.0", True), ("0.28.0", True), ("0.29.0", False)):
        sched = Scheduler(64)
        pinned = sched.pool.get_new_blocks(2)
        sched.kv_cache_manager._partial_tail_pins = {"gone": pinned}  # type: ignore[attr-defined]
        probe = new_probe(VLLM, sched, CONFIG, release=vllm_release(version))
        snap = probe.sample_now(census=True)
        assert snap is not None
        assert (gap(snap.pools[Pool.FULL]) == 0) is owned, version


def test_every_family_names_its_queues_in_the_snapshot() -> None:
    for shape in SHAPES:
        sched = Scheduler(16)
        for name in shape.queues:
            setattr(sched, name, [])
        probe = new_probe(VLLM, sched, CONFIG, release=vllm_release(".".join(map(str, shape.low))))
        snap = probe.sample_now()
        assert snap is not None
        assert set(shape.queues) <= set(snap.queues), shape.family

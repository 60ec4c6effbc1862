"""The probe never harms the scheduler: broken objects give partial snapshots and counted errors."""

from __future__ import annotations

from typing import Any

import pytest

from poolwatch.model.rank import Phase, Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank

CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    serve=False,
    directory="/nonexistent-poolwatch-test-dir",
    release="0.5.4.post1",
)


def make(sched: object) -> SglangProbe:
    clock = FakeClock()
    return new_probe(SGLANG, sched, CONFIG, environ={}, clock=clock, wall=clock)


class Exploding:
    """Every attribute read raises."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"boom: {name}")


def test_an_object_whose_every_attribute_raises_yields_a_partial_snapshot_not_an_exception() -> None:
    probe = make(Exploding())
    snap = probe.sample_now("recv_requests")
    assert snap is not None
    assert snap.phase is Phase.UNKNOWN
    full = snap.pools[Pool.FULL]
    assert full.size is None
    assert {"size", "available", "evictable", "protected"} <= set(full.unreadable)
    assert snap.probe is not None
    assert snap.probe.errors_total > 0
    assert "boom" in snap.probe.last_error


def test_a_missing_pool_attribute_is_named_and_the_other_pools_still_balance() -> None:
    rank = Rank()
    rank.running("a", origin=5, outputs=2)
    del rank.tree.full_protected_size_  # full_protected_size() now raises AttributeError
    snap = make(rank.sched).sample_now()
    assert snap is not None
    assert snap.pools[Pool.FULL].protected is None
    assert snap.pools[Pool.FULL].unreadable == ("protected",)
    assert snap.pools[Pool.MAMBA].unreadable == ()
    assert snap.probe is not None
    assert snap.probe.errors_total == 1


class RaisingQueue:
    @property
    def reqs(self) -> list[Any]:
        raise ValueError("torn")


def test_a_raising_property_in_a_queue_makes_the_phase_unknown() -> None:
    rank = Rank()
    rank.sched.running_batch = RaisingQueue()  # type: ignore[assignment]
    snap = make(rank.sched).sample_now()
    assert snap is not None
    assert snap.phase is Phase.UNKNOWN
    assert "running" not in snap.queues


def test_the_guard_backs_off_exponentially_and_gives_up_after_repeated_failures() -> None:
    guard = Guard(max_consecutive_errors=3)
    tries = []
    for step in range(12):
        if guard.allow():
            tries.append(step)
            guard.failed("sample", RuntimeError("x"))
    assert tries == [0, 2, 6]  # skip 1, then 3, then give up
    assert guard.gave_up
    assert guard.errors_total == 3
    assert guard.health(sample_cost=0, census_cost=0, census_total=0, disabled=False).disabled


def test_a_success_resets_the_back_off() -> None:
    guard = Guard(max_consecutive_errors=3)
    guard.failed("sample", RuntimeError("x"))
    assert not guard.allow()
    assert guard.allow()
    guard.succeeded()
    guard.failed("sample", RuntimeError("y"))
    assert guard.consecutive == 1
    assert not guard.gave_up


def test_a_probe_that_gave_up_stops_sampling_and_says_so_in_a_pool_less_heartbeat() -> None:
    rank = Rank()
    probe = make(rank.sched)
    probe.sample_now()
    for _ in range(CONFIG.max_consecutive_errors):
        probe.guard.failed("sample", RuntimeError("x"))
    probe._publish_health()
    before = probe.latest
    assert before is not None
    assert before.pools
    probe.on_loop_boundary("recv_requests")
    assert probe.latest is not None
    assert probe.latest.pools == {}  # nothing was read: no figure is shown as current
    assert probe.latest.seq > before.seq
    assert probe.latest.probe is not None
    assert probe.latest.probe.disabled


@pytest.mark.parametrize("hook", ["on_loop_boundary", "on_idle", "after_prefill_chunk"])
def test_no_entry_point_raises_even_on_a_hostile_scheduler(hook: str) -> None:
    probe = make(Exploding())
    assert getattr(probe, hook)("h") is None
    assert probe.guard.errors_total > 0

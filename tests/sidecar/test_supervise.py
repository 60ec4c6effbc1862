"""No background task dies silently: crashes are logged once, counted, restarted with backoff,
and a crash loop shows in a self-metric; a state file that cannot be written stops nothing."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tests.detect.sidecar import seeded, settings

from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.supervise import MAX_BACKOFF_S, Supervisor, SupervisorCollector
from rigs.fakes.clock import FakeClock


class Recorder:
    """An injected sleep that records the backoff and advances the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.delays = clock, list[float]()

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.clock.advance(seconds)
        await asyncio.sleep(0)


async def test_a_crashing_task_is_restarted_with_doubling_backoff_and_counted(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sleep = Recorder(clock)
    supervisor = Supervisor(clock=clock, sleep=sleep)
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 8:
            raise OSError("read-only file system")

    with caplog.at_level(logging.ERROR, logger="poolwatch.sidecar"):
        await supervisor.start("poolwatch-alert-timer", flaky)
    assert runs == 9  # restarted until it ran through
    assert supervisor.crashes["poolwatch-alert-timer"] == 8
    assert sleep.delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, MAX_BACKOFF_S, MAX_BACKOFF_S]
    crashed = [r for r in caplog.records if "event=task_crashed" in r.message]
    assert len(crashed) == 1  # the same cause is logged once, with its traceback
    assert crashed[0].exc_info is not None


async def test_three_crashes_within_five_minutes_is_a_crash_loop_in_a_self_metric(clock: FakeClock) -> None:
    supervisor = Supervisor(clock=clock, sleep=Recorder(clock))
    calls = 0

    async def dies_three_times() -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise RuntimeError(f"boom {calls}")

    await supervisor.start("poolwatch-scraper", dies_three_times)
    registry = CollectorRegistry()
    registry.register(SupervisorCollector(supervisor))
    assert supervisor.crash_looping() == ["poolwatch-scraper"]
    assert registry.get_sample_value("poolwatch_task_crashes_total", {"task": "poolwatch-scraper"}) == 3
    assert registry.get_sample_value("poolwatch_task_crash_looping", {"task": "poolwatch-scraper"}) == 1
    clock.advance(301)
    assert supervisor.crash_looping() == []


async def test_stop_ends_a_task_that_ignores_nothing_within_the_timeout(clock: FakeClock) -> None:
    supervisor = Supervisor(clock=clock)
    task = supervisor.start("forever", lambda: asyncio.Event().wait())
    await asyncio.sleep(0)
    await supervisor.stop(timeout=1.0)
    assert task.cancelled()


def test_a_state_file_that_cannot_be_written_is_counted_and_evaluation_goes_on(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "not-a-dir").write_text("x")
    store, seed = seeded(clock, seed_snapshot)
    alerting = build_alerting(
        settings(tmp_path, state_file=str(tmp_path / "not-a-dir" / "alerts.json")), store, clock
    )
    store.put(seed)
    with caplog.at_level(logging.ERROR, logger="poolwatch.sidecar"):
        for _ in range(3):
            clock.advance(5)
            store.put(replace(seed, taken_at=clock.now))
            alerting.evaluate()
    assert alerting.supervisor.errors["state_file_write"] == 3  # tried again at every turn
    assert len([r for r in caplog.records if "event=state_file_write_failed" in r.message]) == 1
    assert alerting.detector.alerts()  # the seed double free is still detected

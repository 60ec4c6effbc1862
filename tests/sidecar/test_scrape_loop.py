from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace

import httpx
import pytest
from prometheus_client import generate_latest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.errors import Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source, Target
from poolwatch.sources.probe_source import ProbeSource
from rigs.fakes.clock import FakeClock

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


class Probes:
    """A fake fleet of probe endpoints, one behaviour per host name."""

    def __init__(self, seed: Snapshot) -> None:
        self.seed = seed
        self.hang = asyncio.Event()  # never set: a target that never answers
        self.in_flight = 0
        self.most_in_flight = 0
        self.restarted = False

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self._answer(request.url.host)
        finally:
            self.in_flight -= 1

    async def _answer(self, host: str) -> httpx.Response:
        seed = self.seed
        for _ in range(3):  # take a few turns of the loop, as a real request would
            await asyncio.sleep(0)
        if host == "slow":
            await self.hang.wait()
        if host == "broken":
            return httpx.Response(500, text="Internal Server Error")
        if host == "garbage":
            return httpx.Response(200, content=b"<html>\x00\xff</html>")
        if host == "huge":
            return httpx.Response(200, content=b"0" * (10 << 20))
        if host == "future":
            return httpx.Response(200, json={**dump_snapshot(seed), "version": 2})
        if host == "restarting":
            snap = replace(seed, seq=1, boot_id="boot-2") if self.restarted else seed
            return httpx.Response(200, json=dump_snapshot(snap))
        worker = replace(seed.worker, worker=host)
        return httpx.Response(200, json=dump_snapshot(replace(seed, worker=worker)))


def probe(host: str) -> ProbeSource:
    return ProbeSource(Target(f"probe:{host}", "probe", f"http://{host}:41234"))


def scraper(store: SnapshotStore, sources: list[Source], clock: FakeClock, **scrape: float) -> Scraper:
    settings = ScrapeSettings(**{"scrape_timeout": 0.05, **scrape})  # type: ignore[arg-type]
    return Scraper(store, sources, settings, clock, rng=random.Random(7))


HOSTS = ["good-a", "slow", "broken", "garbage", "huge", "future", "good-b"]
REASONS = {
    "probe:slow": Reason.TIMEOUT,
    "probe:broken": Reason.HTTP_STATUS,
    "probe:garbage": Reason.DECODE,
    "probe:huge": Reason.TOO_LARGE,
    "probe:future": Reason.VERSION,
}


async def test_broken_targets_fail_by_reason_while_the_others_are_served(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    fleet = Probes(seed_snapshot)
    store = SnapshotStore()
    clock.now = seed_snapshot.taken_at + 1
    # (a timeout the good targets' parsing never reaches on a loaded 2-core machine: only the
    # hanging one times out)
    loop = scraper(store, [probe(h) for h in HOSTS], clock, scrape_timeout=1.0)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet)) as client:
        await loop.scrape_all(client)
    assert [s.worker.worker for s in store.latest()] == ["good-a", "good-b"]
    states = {t.name: t for t in store.targets()}
    assert {name: state.up for name, state in states.items()} == {
        f"probe:{h}": h.startswith("good") for h in HOSTS
    }
    for name, reason in REASONS.items():
        assert dict(states[name].errors) == {reason: 1}, name
    exposition = generate_latest(build_registry(store, clock, 10.0)).decode()
    assert 'poolwatch_target_up{source="probe",target="probe:huge",worker=""} 0.0' in exposition
    assert 'poolwatch_target_up{source="probe",target="probe:good-a",worker=""} 1.0' in exposition
    assert (
        'poolwatch_target_scrape_errors_total{reason="timeout",source="probe",target="probe:slow",'
        'worker=""} 1.0' in (exposition)
    )
    assert 'poolwatch_pool_conservation_gap_slots{dp_rank="0",pool="mamba"' in exposition


async def test_a_restarted_probe_with_a_reset_sequence_number_is_accepted(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    fleet = Probes(seed_snapshot)
    store = SnapshotStore()
    loop = scraper(store, [probe("restarting")], clock)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet)) as client:
        await loop.scrape_all(client)
        fleet.restarted = True
        await loop.scrape_all(client)
    (latest,) = store.latest()
    assert (latest.seq, latest.boot_id) == (1, "boot-2")
    assert store.history(latest.worker.key) == [latest]


async def test_a_hanging_target_never_delays_the_others(seed_snapshot: Snapshot, clock: FakeClock) -> None:
    fleet = Probes(seed_snapshot)
    store = SnapshotStore()
    good_scrapes = 0

    async def fake_sleep(_: float) -> None:
        await asyncio.sleep(0)

    settings = ScrapeSettings(scrape_timeout=3600.0)
    loop = Scraper(store, [probe("slow"), probe("good-a")], settings, clock, fake_sleep, rng=random.Random(1))
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet)) as client:
        task = asyncio.create_task(loop.run(client))
        while good_scrapes < 5:
            await asyncio.sleep(0)
            good_scrapes = next((t.scrapes for t in store.targets() if t.name == "probe:good-a"), 0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [t.name for t in store.targets()] == ["probe:good-a"]  # the slow one has not even finished once
    assert fleet.in_flight == 0  # cancelling the loop cancelled the hanging request


async def test_no_more_scrapes_run_at_once_than_the_concurrency_limit(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    fleet = Probes(seed_snapshot)
    loop = scraper(SnapshotStore(), [probe(f"good-{i}") for i in range(20)], clock, scrape_concurrency=3)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet)) as client:
        await loop.scrape_all(client)
    assert fleet.most_in_flight == 3


class Flaky(Source):
    """A source whose outcome the test sets; ``boom`` raises a bug-like exception."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.outcome = "ok"
        self._target = Target("flaky", "probe", "http://flaky")

    @property
    def target(self) -> Target:
        return self._target

    async def scrape(self, client: httpx.AsyncClient) -> list[Snapshot]:
        if self.outcome == "boom":
            raise KeyError("a bug in a source")
        if self.outcome == "timeout":
            raise httpx.ReadTimeout("x")  # not a ScrapeError either: treated as a bug too
        self.snap = replace(self.snap, seq=self.snap.seq + 1)
        return [self.snap]


async def test_state_changes_are_logged_once_not_every_failed_poll(
    seed_snapshot: Snapshot, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = Flaky(seed_snapshot)
    store = SnapshotStore()
    loop = scraper(store, [flaky], clock)
    caplog.set_level(logging.INFO, logger="poolwatch.sidecar.scraper")
    async with httpx.AsyncClient() as client:
        for outcome in ["ok", "boom", "boom", "boom", "ok", "ok"]:
            flaky.outcome = outcome
            await loop.scrape_once(flaky, client)
    events = [r.getMessage().split()[0] for r in caplog.records]
    assert events == ["event=target_up", "event=source_error", "event=target_down", "event=target_up"]
    (state,) = store.targets()
    assert dict(state.errors) == {Reason.INTERNAL: 3}  # a bug of ours, not the target's text
    assert "KeyError" in next(r.getMessage() for r in caplog.records if "target_down" in r.getMessage())


def test_a_failing_target_backs_off_exponentially_up_to_a_cap() -> None:
    loop = Scraper(
        SnapshotStore(), [], ScrapeSettings(scrape_interval=1.0), max_backoff=30.0, rng=random.Random(3)
    )
    for failures, base in [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (9, 30.0), (60, 30.0)]:
        delay = loop.delay(failures)
        assert base * 0.9 <= delay <= base * 1.1, (failures, delay)


async def test_targets_that_come_and_go_get_and_lose_their_tasks(
    seed_snapshot: Snapshot, clock: FakeClock
) -> None:
    fleet = Probes(seed_snapshot)
    store = SnapshotStore()
    current: list[Source] = [probe("good-a"), probe("good-b")]
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    loop = Scraper(store, lambda: list(current), ScrapeSettings(), clock, fake_sleep, rng=random.Random(2))
    async with httpx.AsyncClient(transport=httpx.MockTransport(fleet)) as client:
        task = asyncio.create_task(loop.run(client))
        await _until(lambda: {t.name for t in store.targets()} == {"probe:good-a", "probe:good-b"})
        current[:] = [
            probe("good-b"),
            probe("good-c"),
        ]  # good-a left, good-c arrived (a new object for b too)
        await _until(lambda: {t.name for t in store.targets()} == {"probe:good-b", "probe:good-c"})
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert all(s < 1.0 + 1e-9 or 0.9 <= s <= 1.1 for s in sleeps)  # the first waits spread over the interval


async def _until(condition: Callable[[], bool], steps: int = 10_000) -> None:
    for _ in range(steps):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")

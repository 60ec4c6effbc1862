"""A watched probe whose verdict does not change is asked once per interval: the sidecar sends back the
signature the probe itself computes, so every long-poll after the first waits out its whole interval."""

from __future__ import annotations

import itertools
import threading

import httpx

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.publication import Publication
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource
from rigs.fakes.clock import FakeClock


async def test_an_unchanged_probe_holds_every_long_poll_for_its_whole_wait(seed_snapshot: Snapshot) -> None:
    clock = FakeClock()
    waited: list[float] = []

    def interval_passes(cond: threading.Condition, timeout: float) -> object:  # nothing new meanwhile
        waited.append(timeout)
        clock.advance(timeout)
        return False

    publication = Publication(clock=clock, wait=interval_passes)
    publication.publish(seed_snapshot)
    asked: list[float] = []

    def probe(request: httpx.Request) -> httpx.Response:  # the probe's route, on the fake clock
        asked.append(clock())
        wait = float(request.url.params.get("wait", "0"))
        seen = request.url.params.get("sig", "")
        snap = publication.wait_changed(seen, wait) if seen else publication.latest
        assert snap is not None
        return httpx.Response(200, json=dump_snapshot(snap))

    target = Target(name="rank0", source="probe", location="http://127.0.0.1:41234", worker="w0")
    source = ProbeSource(target, long_poll_s=1.0)
    async with httpx.AsyncClient(transport=httpx.MockTransport(probe)) as client:
        for _ in range(6):
            await source.scrape(client)
    assert waited == [1.0] * 5  # the first request had no signature yet; each later one waited it all
    assert [b - a for a, b in itertools.pairwise(asked[1:])] == [1.0] * 4

"""A thousand current probes whose figures do not move: after one whole snapshot each, every rank is
kept fresh by the probes' bodiless "nothing changed" answers (their clock alone), none goes stale."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace

import httpx
import pytest
from tests.fleet_helpers import RouteProbe, scrape_until

from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import parse_head
from poolwatch.probe.endpoint.routes import Context, answer
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource
from rigs.fakes.clock import FakeClock

RANKS = 1000
WAIT = 0.5
STALE_AFTER = 10.0
PORT = 41234


def steady_fleet(seed: Snapshot, bodies: Counter[int]) -> httpx.MockTransport:
    """The probes' real route; each answer finds a new sample of the same figures (a fresh clock)."""
    clock = FakeClock()

    def no_wait(cond: object, timeout: float) -> object:  # the handler already waited, on the loop
        clock.advance(timeout)
        return False

    contexts: dict[int, Context] = {}
    for rank in range(RANKS):
        publication = Publication(clock=clock, wait=no_wait)
        worker = replace(seed.worker, worker="fleet", tp_rank=rank)
        publication.publish(replace(seed, worker=worker, probe=ProbeHealth(samples_total=1)))
        contexts[rank] = Context(RouteProbe(publication), publication, PORT, None)

    async def handle(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(float(request.url.params.get("wait", "0")))
        rank = int(request.url.host.removeprefix("rank"))
        ctx = contexts[rank]
        latest = ctx.publication.latest
        assert latest is not None
        assert latest.probe is not None
        probe = replace(latest.probe, samples_total=latest.probe.samples_total + 1)
        ctx.publication.publish(replace(latest, seq=latest.seq + 1, taken_at=time.time(), probe=probe))
        head = f"GET {request.url.raw_path.decode()} HTTP/1.1\r\nHost: 127.0.0.1:{PORT}".encode()
        response = answer(parse_head(head, "127.0.0.1"), ctx)
        if response.status == 200:
            bodies[rank] += 1
        return httpx.Response(response.status, headers=dict(response.headers), content=response.doc)

    return httpx.MockTransport(handle)


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
async def test_a_thousand_unchanged_probes_stay_fresh_on_their_clock_alone(seed_snapshot: Snapshot) -> None:
    bodies: Counter[int] = Counter()
    sources = [
        ProbeSource(Target(f"probe:{i}", SourceKind.PROBE, f"http://rank{i}"), long_poll_s=WAIT)
        for i in range(RANKS)
    ]
    store = SnapshotStore(history=4)
    settings = ScrapeSettings(scrape_interval=WAIT, scrape_timeout=30.0, scrape_concurrency=4)
    await scrape_until(store, sources, settings, steady_fleet(seed_snapshot, bodies), scrapes=4)
    targets = store.targets()
    assert min(t.scrapes for t in targets) >= 4
    assert sum(sum(t.errors.values()) for t in targets) == 0
    assert set(bodies.values()) == {1}  # one whole snapshot per rank; every later answer was a 304
    latest = store.latest()
    assert len(latest) == RANKS
    now = time.time()
    assert max(now - s.taken_at for s in latest) < STALE_AFTER
    assert min(s.seq for s in latest) >= seed_snapshot.seq + 4  # renewed with each answer's clock

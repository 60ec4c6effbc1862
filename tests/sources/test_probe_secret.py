"""The sidecar proves the node's probe secret to the probes it discovers, so a probe keeps a long-poll
slot for it however many local clients hold the public ones (issue 16 item 4); it never sends the
secret itself (issue 24 item 1: a forged discovery file must not steal it)."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from tests.hostile.probes import probe_in

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.conservation import signature
from poolwatch.discovery.auth import Verifier
from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.files import ensure_secret, read_secret
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.endpoint import server as probe_server
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.targets import TargetSet
from poolwatch.sources.wire import WireClient


def settings(probe_dir: Path, **env: str) -> Settings:
    return Settings.from_env({"POOLWATCH_WORKER": "w", "POOLWATCH_PROBE_DIR": str(probe_dir), **env})


async def test_a_discovered_probe_gets_a_signature_never_the_secret_and_a_listed_one_nothing(
    tmp_path: Path, seed_snapshot: Snapshot
) -> None:
    secret = ensure_secret(tmp_path)
    write_discovery(tmp_path, DiscoveryEntry("http://127.0.0.1:4000", 7, "w", 0, 0, 0, "b", 1.5))
    listed = {"POOLWATCH_PROBE_URLS": "http://127.0.0.1:4001"}
    sources = TargetSet(settings(tmp_path, **listed), lambda: 0.0).current()
    seen: dict[str, str | None] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        seen[str(request.url.port)] = request.headers.get("authorization")
        return httpx.Response(200, json=dump_snapshot(seed_snapshot))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        for source in sources:
            await source.scrape(client)
    shown = seen.pop("4000")
    assert seen == {"4001": None}
    assert shown is not None
    assert shown.startswith("Poolwatch-HMAC ts=")
    assert secret not in shown
    verifier = Verifier(secret, "127.0.0.1:4000")
    assert verifier.verify(shown, "GET", "/v1/snapshot", time.time())
    assert not verifier.verify(shown, "GET", "/v1/snapshot", time.time())  # one use
    assert not Verifier(secret, "127.0.0.1:4001").verify(shown, "GET", "/v1/snapshot", time.time())


def test_a_new_secret_renews_the_discovered_sources(tmp_path: Path) -> None:
    write_discovery(tmp_path, DiscoveryEntry("http://127.0.0.1:4000", 7, "w", 0, 0, 0, "b", 1.5))
    targets = TargetSet(settings(tmp_path), lambda: 0.0)
    before = targets.current()
    assert targets.current() == before  # kept while nothing changes
    ensure_secret(tmp_path)  # the first probe of the node created it after the sidecar started
    assert targets.current() != before


@pytest.fixture
def served(tmp_path: Path) -> Iterator[SglangProbe]:
    with probe_in(tmp_path) as probe:
        yield probe


def hostile_long_poll(port: int, seen: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", f"/v1/snapshot?sig={seen}&wait=30")
        conn.getresponse().read()
    finally:
        conn.close()


async def wait_for(condition: object, what: str) -> None:
    for _ in range(1000):  # at most ~10 s
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_with_every_public_long_poll_held_the_sidecar_still_watches_its_probe(
    served: SglangProbe, tmp_path: Path
) -> None:
    assert served.latest is not None
    assert served.publisher is not None
    assert served.publisher.server is not None
    port, seen, boot = served.publisher.server.port, signature(served.latest), served.latest.boot_id
    hostile = [threading.Thread(target=hostile_long_poll, args=(port, seen)) for _ in range(3)]
    for t in hostile:
        t.start()
    await wait_for(lambda: served.publication.waiting == probe_server.PUBLIC_LONG_POLLS, "public slots held")
    long = settings(tmp_path, POOLWATCH_SCRAPE_INTERVAL="20", POOLWATCH_SCRAPE_TIMEOUT="30")
    (source,) = TargetSet(long, lambda: 0.0).current()
    assert isinstance(source, ProbeSource)
    assert read_secret(tmp_path) is not None
    async with WireClient(timeout=30) as lane:  # the sidecar's watch lane
        (first,) = await source.scrape(lane)  # answered at once: its signature is new to the source
        watch = asyncio.create_task(source.scrape(lane))  # now it waits for a change...
        await wait_for(lambda: served.publication.waiting == probe_server.PUBLIC_LONG_POLLS + 1, "a 4th poll")
        served.publication.publish(replace(served.latest, boot_id="restarted"))
        (changed,) = await asyncio.wait_for(watch, 10)  # ... in the reserved slot, woken by the change
    for t in hostile:
        t.join(timeout=10)
    assert (first.boot_id, changed.boot_id) == (boot, "restarted")

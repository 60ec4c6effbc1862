"""A sidecar watching a thousand probes: every rank refreshed each interval, and SIGTERM still stops it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest
from tests.fleet_helpers import scrape_until
from tests.helpers import free_port

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.probe_source import ProbeSource

RANKS = 1000
WAIT = 0.5  # each probe answers a long-poll after this (its verdict never changes)


def rank_body(seed: Snapshot, rank: int) -> bytes:
    worker = replace(seed.worker, worker="fleet", tp_rank=rank)
    return json.dumps(dump_snapshot(replace(seed, worker=worker, taken_at=time.time()))).encode()


def fake_fleet(seed: Snapshot) -> httpx.MockTransport:
    """A thousand probes: a long-poll is answered after ``wait``, a plain request at once."""

    async def handle(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        if params.get("sig"):
            await asyncio.sleep(float(params.get("wait", "0")))
        rank = int(request.url.host.removeprefix("rank"))
        return httpx.Response(
            200, content=rank_body(seed, rank), headers={"content-type": "application/json"}
        )

    return httpx.MockTransport(handle)


@pytest.mark.slow  # not core: the inner loop skips it, CI runs it
async def test_a_thousand_long_polling_probes_are_each_refreshed_every_interval_with_four_scrape_slots(
    seed_snapshot: Snapshot,
) -> None:
    sources = [
        ProbeSource(Target(f"probe:{i}", "probe", f"http://rank{i}"), long_poll_s=WAIT) for i in range(RANKS)
    ]
    store = SnapshotStore(history=4)
    # a generous timeout: on a starved machine a slow answer must not count as an error here
    settings = ScrapeSettings(scrape_interval=WAIT, scrape_timeout=30.0, scrape_concurrency=4)
    # four slots held by waiting long-polls would refresh 8 ranks a second: ~6 min for this
    await scrape_until(store, sources, settings, fake_fleet(seed_snapshot), scrapes=2)
    targets = store.targets()
    assert len(targets) == RANKS
    assert min(t.scrapes for t in targets) >= 2
    assert sum(sum(t.errors.values()) for t in targets) == 0
    assert len(store.latest()) == RANKS


# -- SIGTERM under load: a real `poolwatch serve` process -------------------------------------------


@contextlib.contextmanager
def loopback_fleet(seed: Snapshot) -> Iterator[int]:
    """A thousand probes on one loopback port (``/rank<N>/v1/snapshot``), HTTP/1.1 keep-alive."""
    loop = asyncio.new_event_loop()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                target = (await reader.readuntil(b"\r\n\r\n")).split(b" ", 2)[1].decode()
                path, _, query = target.partition("?")
                params = parse_qs(query)
                if params.get("sig", [""])[0]:
                    await asyncio.sleep(float(params.get("wait", ["0"])[0]))
                body = rank_body(seed, int(path.split("/")[1].removeprefix("rank")))
                writer.write(head % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.run_until_complete(close_all(server))
        loop.close()


async def close_all(server: asyncio.Server) -> None:
    """Stop the handlers (each closes its connection) and the listening socket."""
    server.close()
    handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in handlers:
        task.cancel()
    await asyncio.gather(*handlers, return_exceptions=True)
    await server.wait_closed()


def scrapes(url: str) -> float:
    with contextlib.suppress(OSError):
        text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        return sum(
            float(ln.rsplit(" ", 1)[1])
            for ln in text.splitlines()
            if ln.startswith("poolwatch_target_scrapes_total")
        )
    return 0.0


@pytest.mark.slow
def test_sigterm_stops_a_sidecar_scraping_a_thousand_probes_with_a_thousand_slots_within_seconds(
    seed_snapshot: Snapshot, tmp_path: Path
) -> None:
    with loopback_fleet(seed_snapshot) as fleet_port:
        targets = tmp_path / "targets.yaml"
        lines = [
            f"  - {{name: rank{i}, source: probe, url: 'http://127.0.0.1:{fleet_port}/rank{i}'}}"
            for i in range(RANKS)
        ]
        targets.write_text("targets:\n" + "\n".join(lines) + "\n")
        port = free_port()
        cmd = [sys.executable, "-m", "poolwatch.cli", "serve", "--targets-file", str(targets)]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--scrape-concurrency", "1000"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("POOLWATCH_")}
        env["POOLWATCH_WORKER"] = "fleet"
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):  # under load: every probe scraped at least once (at most ~60 s)
                if scrapes(url) >= RANKS:
                    break
                time.sleep(0.1)
            assert scrapes(url) >= RANKS
            proc.send_signal(signal.SIGTERM)  # uvicorn shuts down, then re-raises the signal
            assert proc.wait(timeout=10) in (0, -signal.SIGTERM)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

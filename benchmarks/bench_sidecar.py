"""Sidecar cost: CPU and memory of scraping 8, 64 and 1,000 probe targets at 1 Hz, the time of
one scrape cycle and of one ``/metrics`` render.

Each target is a probe endpoint answering a realistic snapshot (full, SWA, Mamba and request
pools, queues, probe health).  ``mock`` answers through ``httpx.MockTransport`` (no sockets:
the sidecar's own cost); ``loopback`` through a fake probe server in a child process on
127.0.0.1 (adds the HTTP client's socket work; the server's CPU is not counted).

Run: ``python benchmarks/bench_sidecar.py [--seconds 10] [--sizes 8,64,1000] [--modes mock,loopback]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from prometheus_client import generate_latest

from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import ProbeHealth, Snapshot
from poolwatch.settings.groups import ScrapeSettings
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Source, Target
from poolwatch.sources.probe_source import ProbeSource

SERVER = r"""
import asyncio, sys
TEMPLATE = sys.stdin.buffer.read()  # a snapshot with "tp_rank": 0 and "seq": 48211
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
seq = 48211
async def serve(reader, writer):
    global seq
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            rank = request.split(b" ", 2)[1].split(b"/")[1].removeprefix(b"rank")
            seq += 1
            body = TEMPLATE.replace(b'"tp_rank": 0', b'"tp_rank": ' + rank, 1)
            body = body.replace(b'"seq": 48211', b'"seq": %d' % seq, 1)
            writer.write(HEAD % len(body) + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


@dataclass(frozen=True)
class Row:
    mode: str
    targets: int
    cpu: float  # CPU seconds per wall second (1.0 = one core)
    rss_mb: float
    cycle_ms: float
    render_ms: float
    scrapes: int
    failures: int


def payload(rank: int, now: float) -> Snapshot:
    def exact(pool: Pool, size: int, avail: int, evict: int, prot: int, held: int) -> PoolAccount:
        return PoolAccount(pool, size, avail, evict, prot, held, 0, exactness=Exactness.EXACT)

    return Snapshot(
        worker=WorkerId(
            "qwen3-next-prefill-0",
            Role.PREFILL,
            0,
            rank,
            0,
            "Qwen3-Next-80B-A3B",
            "0.5.12",
            "10.0.0.7",
            engine="sglang",
        ),
        seq=48211,
        taken_at=now,
        phase=Phase.BUSY,
        pools={
            Pool.FULL: exact(Pool.FULL, 1664761, 1500000, 120000, 30000, 14761),
            Pool.SWA: exact(Pool.SWA, 400000, 300000, 60000, 20000, 20000),
            Pool.MAMBA: exact(Pool.MAMBA, 476, 300, 100, 40, 36),
            Pool.REQ: exact(Pool.REQ, 158, 120, 0, 0, 38),
        },
        source="probe",
        queues={"waiting": 3, "running": 38, "bootstrap": 1, "inflight": 2},
        probe=ProbeHealth(samples_total=48211, sample_cost_seconds=0.00004, census_total=12),
        idle_check_strict=True,
        boot_id="b0",
    )


class Fleet:
    """Answers every probe URL with the snapshot of its rank, fresh each time (mock mode)."""

    def __init__(self, now: float) -> None:
        self._bodies: dict[str, bytes] = {}
        self._now = now
        self._seq = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        body = self._bodies.get(host)
        if body is None:
            snap = payload(int(host.removeprefix("rank")), self._now)
            body = self._bodies[host] = json.dumps(dump_snapshot(snap)).encode()
        self._seq += 1  # a new iteration each time, as a live scheduler would have
        body = body.replace(b'"seq": 48211', b'"seq": %d' % (48211 + self._seq), 1)
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(mode: str, n: int, seconds: float, base: str) -> Row:
    now = time.time()
    if mode == "mock":
        sources: list[Source] = [
            ProbeSource(Target(f"probe:{i}", "probe", f"http://rank{i}")) for i in range(n)
        ]
        transport: httpx.AsyncBaseTransport = httpx.MockTransport(Fleet(now))
    else:
        sources = [ProbeSource(Target(f"probe:{i}", "probe", f"{base}/rank{i}")) for i in range(n)]
        transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=256)
        )
    store = SnapshotStore(history=64)
    settings = ScrapeSettings(scrape_interval=1.0, scrape_timeout=2.0, scrape_concurrency=64)
    scraper = Scraper(store, sources, settings)
    async with httpx.AsyncClient(transport=transport, timeout=2.0) as client:
        cycle = min([await scraper.scrape_all(client) for _ in range(3)])
        cpu0, wall0 = time.process_time(), time.perf_counter()
        task = asyncio.create_task(scraper.run(client))
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    registry = build_registry(store, time.time, 1e9)
    renders = [_timed(lambda: generate_latest(registry)) for _ in range(5)]
    targets = store.targets()
    return Row(
        mode, n, cpu / wall, rss_mb(), cycle * 1000, min(renders) * 1000,
        sum(t.scrapes for t in targets), sum(sum(t.errors.values()) for t in targets),
    )  # fmt: skip


def _timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    body = json.dumps(dump_snapshot(payload(0, time.time()))).encode()
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if proc.stdin is None or proc.stdout is None:
        raise RuntimeError("no pipes to the fake probe server")
    proc.stdin.write(body)
    proc.stdin.close()
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="scraping time per measurement")
    parser.add_argument("--sizes", default="8,64,1000")
    parser.add_argument("--modes", default="mock,loopback")
    args = parser.parse_args(list(argv or []))
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    logging.getLogger("poolwatch.sidecar.scraper").setLevel(
        logging.ERROR
    )  # failures are counted in the table
    print(f"baseline RSS {rss_mb():.0f} MB (httpx, fastapi, prometheus_client loaded); pid {os.getpid()}")
    print(f"{'mode':<9} {'targets':>7} {'CPU (cores)':>11} {'RSS MB':>7} {'cycle ms':>9} {'/metrics ms':>11} "
          f"{'scrapes':>8} {'failed':>6}")  # fmt: skip
    server = None
    try:
        for mode in modes:
            base = ""
            if mode == "loopback":
                server, base = start_server()
            for n in sizes:
                r = asyncio.run(measure(mode, n, args.seconds, base))
                print(f"{r.mode:<9} {r.targets:>7} {r.cpu:>11.3f} {r.rss_mb:>7.0f} {r.cycle_ms:>9.1f} "
                      f"{r.render_ms:>11.1f} {r.scrapes:>8} {r.failures:>6}", flush=True)  # fmt: skip
    finally:
        if server is not None:
            server.kill()
            server.wait()
    print(
        "CPU: process CPU seconds per wall second while scraping every target once a second (1.0 = a core)."
    )
    print("cycle: one scrape of every target at once (concurrency 64); /metrics: one render of every rank.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Shared helpers of the vLLM sources tests: the fixture folders, vLLM's dialect over lines or a file,
the captured server faked and a sidecar's reads of it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

import httpx
from tests.helpers import FIXTURES
from tests.sources.logs import file_lines

from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.scraper import Scraper
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.logfile.events import LogEvent
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.targets import TargetSet
from poolwatch.sources.vllm.log.dialect import DIALECT
from rigs.fakes.clock import FakeClock
from rigs.log_records import records

LOGS = FIXTURES / "vllm-logs"
PAGES = FIXTURES / "vllm"
DAY = dt.date(2026, 12, 3)  # the day the fixtures are read on (vLLM's stamps carry no year)


def local(stamp: str) -> float:
    """Unix seconds of a local ``YYYY-MM-DD HH:MM:SS``."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def assemble(lines: Iterable[str], day: dt.date = DAY) -> list[LogRecord]:
    return records(DIALECT, lines, day)


def file_records(path: Path, day: dt.date = DAY) -> list[LogRecord]:
    return assemble(file_lines(path), day)


def file_events(path: Path, day: dt.date = DAY) -> list[LogEvent]:
    return [e for r in file_records(path, day) for e in DIALECT.interpret(r)]


def vllm_server(request: httpx.Request) -> httpx.Response:
    """vLLM 0.32.0's server as the real capture shows it: its ``/metrics`` page and ``/version``."""
    if request.url.path == "/metrics":
        return httpx.Response(200, text=(PAGES / "v0.32.0-cpu-real.metrics.txt").read_text())
    if request.url.path == "/version":
        return httpx.Response(200, json={"version": "0.32.0"})
    return httpx.Response(404)


async def read_server_and_log(settings: Settings, store: SnapshotStore, clock: FakeClock) -> None:
    """What a sidecar of ``settings`` reads into ``store`` from :func:`vllm_server` and its log: two
    reads a second apart (the second finds the log quiet: its last record is whole), sources closed."""
    sources = TargetSet(settings, clock).current
    async with httpx.AsyncClient(transport=httpx.MockTransport(vllm_server)) as client:
        loop = Scraper(store, sources, settings.scrape, clock)
        for _ in range(2):
            await loop.scrape_all(client)
            clock.advance(1)
    for source in sources():
        source.close()

"""The live vLLM log source: what a growing log says, rank by rank, as the sidecar scrapes it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tests.sources.logs import drain
from tests.sources.vllm.fakes import LOGS, local

from poolwatch.model.rank import IncidentKind, Phase
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.vllm.log.dialect import DIALECT
from rigs.fakes.clock import FakeClock

NOW = local("2026-12-03 16:30:00")  # a few minutes after the real capture's crash
EC = "(EngineCore pid=12) ERROR 12-03 16:29:{s:02d} [core.py:1512] "


@pytest.fixture
def open_log(log_source: Callable[..., LogSource]) -> Callable[..., LogSource]:
    return functools.partial(log_source, DIALECT, clock=FakeClock(NOW))


async def test_the_real_double_free_is_one_crash_and_the_latest_figures(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.32.0-cpu-real-double-free.log"), client)
    assert [(s.worker.key, [i.kind for i in s.incidents]) for s in snaps] == [
        ("w0/dp0-tp0-pp0", [IncidentKind.SCHEDULER_EXCEPTION])  # the API server's word adds nothing
    ]
    (crash,) = snaps
    assert (crash.worker.engine, crash.worker.release, crash.source) == ("vllm", "0.32.0", "vllm-log")
    assert "[AssertionError at v1/core/block_pool.py:690 in get_new_blocks" in crash.incidents[0].message
    assert crash.boot_id == f"log@{local('2026-12-03 16:26:03'):.0f}"


async def test_a_crash_is_read_once_its_traceback_is_whole(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        EC.format(s=1)
        + "EngineCore encountered a fatal error.\r\n"
        + EC.format(s=1)
        + "Traceback (most recent call last):\r\n"
    )
    source = open_log(log)
    assert await source.scrape(client) == []  # the record may go on
    with log.open("a") as f:
        f.write(EC.format(s=1) + '  File "/v/vllm/v1/core/block_pool.py", line 690, in get_new_blocks\r\n')
        f.write(EC.format(s=1) + "AssertionError\n")
        f.write(
            "(APIServer pid=11) INFO 12-03 16:29:02 [loggers.py:335] Engine 000: Running: 0 reqs, Waiting: "
            "0 reqs, CPU KV cache usage: 0.0%\n"
        )
    (crash,) = await source.scrape(client)  # the next line shows the traceback whole
    (stats,) = await source.scrape(client)  # the log is quiet: its last record is whole too
    assert crash.incidents[0].message.splitlines()[-1] == "AssertionError"
    assert crash.taken_at == local("2026-12-03 16:29:01")
    assert (stats.incidents, stats.phase, stats.queues) == ((), Phase.UNKNOWN, {"running": 0, "waiting": 0})


async def test_a_stamp_in_the_future_is_clamped_to_now(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(EC.format(s=1).replace("16:29:01", "18:00:00") + "EngineCore failed to start.\n")
    (snap,) = await drain(open_log(log), client)
    assert snap.taken_at == NOW


async def test_engines_past_the_cap_are_dropped_and_said_once(
    open_log: Callable[..., LogSource],
    client: httpx.AsyncClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = tmp_path / "vllm.log"
    line = (
        "(APIServer pid=1) INFO 12-03 16:29:00 [loggers.py:335] "
        "Engine {:03d}: Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n"
    )
    log.write_text("".join(line.format(i) for i in range(5)))
    snaps = await drain(open_log(log, max_ranks=2), client)
    assert sorted(s.worker.dp_rank for s in snaps) == [0, 1]
    assert sum("event=log_ranks_capped" in r.message for r in caplog.records) == 1

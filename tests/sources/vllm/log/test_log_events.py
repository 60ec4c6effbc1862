"""What vLLM's records say, and how the fold turns them into the sidecar's snapshots."""

from __future__ import annotations

import pytest
from tests.sources.vllm.fakes import LOGS, assemble, file_events

from poolwatch.conservation import assess_snapshot, describe
from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, Role, SourceKind
from poolwatch.sources.logfile.events import Dead, Figures, Note, RankIncident, Start
from poolwatch.sources.logfile.fold import LogFold
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.vllm.log.dialect import DIALECT
from poolwatch.sources.vllm.log.events import interpret, marks

API = "(APIServer pid=1) INFO 10-31 10:40:43 [loggers.py:335] "


def fold(max_ranks: int = 1024) -> LogFold:
    return LogFold("w", Role.UNIFIED, "/logs/w.log", max_ranks, engine="vllm", source=SourceKind("vllm-log"))


def stats(engine: str, usage: str, running: int, waiting: int = 0) -> Figures:
    line = f"{API}{engine}: Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {usage}%"
    (found,) = events(line)
    assert isinstance(found, Figures)
    return found


EC = "(EngineCore_DP1 pid=12) INFO 10-31 10:40:43 [core.py:130] "


def events(*lines: str) -> list[object]:
    return [e for r in assemble(lines) for e in interpret(r)]


assert DIALECT.interpret is interpret


def test_startup_lines_start_an_engine_and_give_its_capacity_in_tokens() -> None:
    found = events(
        EC + "Initializing a V1 LLM engine (v0.31.0) with config: model='m'",
        EC.replace("core.py:130", "kv_cache_utils.py:2464")
        + "GPU + host KV cache size: 4,194,304 tokens, Maximum concurrency for 131,072 tokens per request: "
        "32.00x",
    )
    assert [type(e) for e in found] == [Start, Note]
    assert isinstance(found[0], Start)
    assert (found[0].ranks, found[0].release) == (Ranks(1), "0.31.0")
    assert isinstance(found[1], Note)
    assert found[1].text == "kv 4,194,304 tokens"


def test_fault_tolerance_lines_are_an_incident_and_statuses() -> None:
    ft = "(EngineCore_DP0 pid=7) WARNING 10-31 10:40:43 [engine_core_sentinel.py:83] "
    found = events(
        ft + "[FT] Busy loop raised AssertionError. Waiting for recovery.",
        ft.replace("WARNING", "INFO").replace(":83", ":100") + "[FT] Engine 0 status -> UNHEALTHY:",
        ft.replace("WARNING", "ERROR").replace(":83", ":191") + "[FT] No recovery within 60s timeout.",
    )
    assert isinstance(found[0], RankIncident)
    assert found[0].incident.kind is IncidentKind.SCHEDULER_EXCEPTION
    assert [(type(e), getattr(e, "text", "")) for e in found[1:]] == [
        (Note, "ft unhealthy"),
        (Note, "ft no-recovery"),
    ]


@pytest.mark.parametrize(
    ("line", "dp"),
    [
        (
            "(APIServer pid=9) ERROR 10-31 10:40:43 [core_client.py:667] Engine core proc EngineCore_DP1 "
            "died unexpectedly, shutting down client.",
            1,
        ),
        (
            "(APIServer pid=9) WARNING 10-31 10:40:43 [core_client.py:870] [shutdown] MPClient: engine core "
            "exited unexpectedly; starting cleanup",
            None,
        ),
        (
            "(APIServer pid=9) INFO 10-31 10:40:43 [async_llm.py:604] Request cmpl-1 failed (engine dead).",
            None,
        ),
    ],
)
def test_the_api_servers_word_on_a_dead_engine_is_read(line: str, dp: int | None) -> None:
    (found,) = events(line)
    assert isinstance(found, Dead)
    assert found.ranks == (None if dp is None else Ranks(dp))


def test_noise_says_nothing() -> None:
    assert (
        events(
            "(APIServer pid=9) INFO 10-31 10:40:43 [launcher.py:195] Route: /metrics, Methods: GET",
            'INFO:     127.0.0.1:1 - "GET /metrics HTTP/1.1" 200 OK',
            "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
        )
        == []
    )


def test_a_statistics_line_is_a_busy_snapshot_with_no_pool_figure_unless_below_zero() -> None:
    folded = fold()
    busy = folded.apply(stats("Engine 000", "55.5", running=3, waiting=1))
    drained = folded.apply(stats("Engine 000", "0.0", running=0))
    surplus = folded.apply(stats("Engine 001", "-0.0", running=0))
    assert busy is not None
    assert drained is not None
    assert surplus is not None
    assert (busy.phase, drained.phase) == (Phase.BUSY, Phase.UNKNOWN)  # an idle vLLM proves nothing
    assert busy.queues == {"running": 3, "waiting": 1}
    assert busy.pools == {Pool.FULL: PoolAccount(Pool.FULL, None)}
    assert describe(assess_snapshot(surplus)) == "full: surplus of at least 1 slot (double free)"
    assert surplus.worker.key == "w/dp1-tp0-pp0"
    assert (surplus.worker.engine, surplus.source) == ("vllm", "vllm-log")


def test_a_start_names_the_boot_and_the_release() -> None:
    folded = fold()
    assert folded.apply(Start(100.0, Ranks(0), "0.34.0")) is None
    snap = folded.apply(stats("Engine 000", "1.0", running=1))
    assert snap is not None
    assert (snap.boot_id, snap.worker.release, snap.seq) == ("log@100", "0.34.0", 1)


def test_the_api_servers_word_is_an_incident_only_when_enginecore_said_nothing() -> None:
    folded = fold()
    crash = next(
        e for e in file_events(LOGS / "v0.10.2-s1-remove-invalid-block.log") if isinstance(e, RankIncident)
    )
    assert folded.apply(crash) is not None
    assert folded.apply(Dead(1.0, Ranks(0), "Engine core proc EngineCore_DP0 died unexpectedly")) is None
    assert folded.apply(Dead(1.0, None, "Request x failed (engine dead).")) is None
    killed = fold()
    first = killed.apply(Dead(1.0, None, "EngineCore died (seen by the API server): [shutdown] MPClient"))
    assert first is not None
    (incident,) = first.incidents
    assert incident.message.startswith("EngineCore died (seen by the API server): ")
    assert killed.apply(Dead(2.0, None, "Request x failed (engine dead).")) is None
    assert killed.apply(Start(3.0, Ranks(0), "0.19.1")) is None  # a restart: the next death counts again
    assert killed.apply(Dead(4.0, Ranks(0), "Engine core proc EngineCore_DP0 died unexpectedly")) is not None


def test_one_log_names_a_bounded_number_of_engines() -> None:
    folded = fold(max_ranks=2)
    snaps = [folded.apply(stats(f"Engine {dp:03d}", "1.0", running=1)) for dp in range(5)]
    assert [s is not None for s in snaps] == [True, True, False, False, False]
    assert folded.dropped == 3


def test_the_aggregated_line_is_no_ranks() -> None:
    assert fold().apply(stats("2 Engines Aggregated", "1.0", running=1)) is None


@pytest.mark.parametrize(
    ("line", "is_vllm"),
    [
        (
            "(APIServer pid=1) INFO 10-31 10:40:43 [loggers.py:335] Engine 000: Running: 1 reqs, Waiting: 0 "
            "reqs, GPU KV cache usage: 1.0%",
            True,
        ),
        ("INFO 10-31 10:40:43 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: x", True),
        (
            "(EngineCore pid=1) ERROR 10-31 10:40:43 [core.py:1512] EngineCore encountered a fatal error.",
            True,
        ),
        (
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
            "(above) for the root cause.",
            True,
        ),
        ("(APIServer pid=1) INFO 10-31 10:40:43 [launcher.py:195] Route: /health, Methods: GET", True),
        (
            "(EngineCore_0 pid=3) INFO 08-21 07:17:09 [scheduler.py:495] Preempted request c-1 resumed!",
            True,
        ),
        ("(VllmWorker TP3 pid=2012390) INFO 08-11 07:28:26 [shm_broadcast.py:289] vLLM message queue", True),
        ("[2025-10-31 10:40:43 TP0] Decode batch, #running-req: 3, #token: 1032, token usage: 0.01", False),
        ("[2025-10-31 10:40:43 TP0] Scheduler hit an exception: Traceback (most recent call last):", False),
    ],
)
def test_every_vllm_line_carries_its_marks_and_sglangs_do_not(line: str, is_vllm: bool) -> None:
    assert (marks(line) is not None) is is_vllm

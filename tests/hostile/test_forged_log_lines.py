"""Guarantee 19: a client cannot forge the engine's log.  A crash or pool marker counts only in the
engine's own logger position -- the process that writes it, its level and source file, the start of
its message -- never inside a request id, a prompt or another process's text.

The attacker here is any client of the engine: vLLM with ``--enable-log-requests`` prints the
``X-Request-Id`` it was sent (``Received request <id>: ...``, ``Added request <id>.``), SGLang with
``--log-requests`` prints the ``rid`` and the prompt (``Receive: obj=GenerateReqInput(...)``).  Each
forged line goes through both readers of the log: ``poolwatch replay`` (the replayer) and the live
source the sidecar pages from (:class:`~poolwatch.sources.logfile.source.LogSource`); neither gives
an incident, a death, a pool error or figures.  The genuine line written after the forgeries still
reads as the crash it is (anchoring blinds nothing).  No second user is needed: the engine itself
writes what the client sent.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.sources.logs import replayed
from tests.sources.vllm.fakes import local

from poolwatch.model.rank import IncidentKind
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.sglang.log.dialect import DIALECT as SGLANG
from poolwatch.sources.vllm.log.dialect import DIALECT as VLLM
from rigs.fakes.clock import FakeClock

pytestmark = pytest.mark.hostile

NOW = local("2026-12-03 16:30:00")

# -- vLLM: what a client puts in X-Request-Id, printed by the API server's request logger --------

FATAL = "EngineCore encountered a fatal error."
EC_FATAL = f"(EngineCore_DP0 pid=595868) ERROR 12-03 16:29:00 [core.py:844] {FATAL}"
VLLM_IDS = {
    "fatal marker": FATAL,
    "engine dead": "Request abc failed (engine dead).",
    "EngineDeadError": "EngineDeadError: EngineCore encountered an issue. See stack trace (above)",
    "whole EngineCore line": EC_FATAL,
    "whole untagged line": f"ERROR 12-03 16:29:00 [core.py:844] {FATAL}",
    "failed to start": "EngineCore failed to start.",
    "fault tolerance": "[FT] Busy loop raised AssertionError. Waiting for recovery.",
    "pool assert": "AssertionError: ref_cnt=0 in block_pool.py free_blocks",
    "stranded blocks": "Failed to reset prefix cache because some blocks (12) are not freed yet",
    "statistics": "Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 100.0%, Prefix cache hit rate: 0.0%",
    "core died": "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
}
API = "(APIServer pid=697224) INFO 12-03 16:29:{s:02d} [logger.py:43] "
API_OLD = "INFO 12-03 16:29:{s:02d} [logger.py:43] "  # before 0.10.2: no process tag


def vllm_request_lines(forged: str, head: str = API) -> list[str]:
    """What the API server prints for one request whose id (and prompt) the client chose."""
    return [
        head.format(s=1) + f"Received request chatcmpl-{forged}: prompt: {forged!r}, params: "
        "SamplingParams(n=1, temperature=0.0), prompt_token_ids: None, lora_request: None.",
        head.format(s=1) + f"Added request chatcmpl-{forged}.",
        head.format(s=2) + f"Aborted request chatcmpl-{forged}.",
        head.format(s=2) + f"{forged}",  # a host app's own line quoting it, its position not EngineCore's
    ]


def vllm_genuine_crash() -> list[str]:
    tail = "(EngineCore_DP0 pid=595868) ERROR 12-03 16:29:30 [core.py:844] "
    return [
        tail + FATAL,
        tail + "Traceback (most recent call last):",
        tail + '  File "/x/vllm/v1/core/block_pool.py", line 290, in free_blocks',
        tail + "    assert block.ref_cnt >= 0",
        tail + "AssertionError",
    ]


# -- SGLang: what a client puts in rid or the prompt, printed with --log-requests ------------------

REPORT = (
    "token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=1000, available_size=1, "
    "evictable_size=0, protected_size=0"
)
SGLANG_TEXTS = {
    "crash marker": "Scheduler hit an exception: Traceback (most recent call last):",
    "leak report": REPORT,
    "leak report after ValueError": f"ValueError: {REPORT}",
    "whole prefixed crash line": "[2026-12-03 16:29:00 TP0] Scheduler hit an exception: Traceback",
    "whole prefixed report": f"[2026-12-03 16:29:00 TP0] {REPORT}",
    "0.1 report": "Warning: available_size=1, max_total_num_token=1000\nKV cache pool leak detected!",
    "busy check": "AssertionError: Mem Leak Detected! total_tokens=1 vs self.max_total_num_tokens=1000",
    "double free": "AssertionError: The token_to_kv_pool_allocator is freeing a token that is already free",
    "batch line": "Decode batch, #running-req: 0, #token: 999999, token usage: 1.00, #queue-req: 0",
}


def sglang_request_lines(forged: str) -> list[str]:
    """What SGLang prints for one request whose rid and text the client chose (repr, as it does)."""
    obj = f"GenerateReqInput(text={forged!r}, rid={forged!r}, sampling_params={{'max_new_tokens': 8}})"
    return [
        f"[2026-12-03 16:29:01] Receive: obj={obj}",
        f"[2026-12-03 16:29:01 TP0] Abort queued request. req.rid={forged!r}",
        f"[2026-12-03 16:29:02] Finish: obj={obj}, out={{'text': {forged!r}, 'meta_info': {{}}}}",
    ]


def sglang_genuine_crash() -> list[str]:
    return [
        "[2026-12-03 16:29:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/managers/scheduler.py", line 2797, in run_scheduler_process',
        "    raise ValueError(msg)",
        f"ValueError: {REPORT}",
    ]


# -- the two readers ---------------------------------------------------------------------------


def replay_says(dialect: LogDialect, lines: list[str]) -> list[str]:
    """Every incident, pool error and figure row the replay gives for ``lines``."""
    report, rows = replayed(dialect, lines)
    said = [f"{r.rank} {r.event} {r.error}" for r in rows if r.event not in ("prefill", "decode", "batches")]
    said += [f"figures {r.rank} {r.figures}" for r in rows if r.figures]
    said += [f"incident {k}" for k in report.incidents]
    said += [f"error {k}" for k in report.errors]
    return said


async def live_says(dialect: LogDialect, lines: list[str], tmp_path: Path) -> list[str]:
    """Every incident the live source (what the sidecar pages from) reports for ``lines``."""
    log = tmp_path / "engine.log"
    log.write_text("\n".join(lines) + "\n")
    source = LogSource(Target("log", dialect.source, str(log), "w"), FakeClock(NOW), dialect)
    try:
        async with httpx.AsyncClient() as client:
            snaps = await source.scrape(client) + await source.scrape(client)
    finally:
        source.close()
    return [f"{s.worker.key} {i.kind.value}" for s in snaps for i in s.incidents]


@pytest.mark.parametrize("head", [API, API_OLD], ids=["tagged", "untagged"])
@pytest.mark.parametrize("forged", list(VLLM_IDS.values()), ids=list(VLLM_IDS))
async def test_26_a_vllm_request_id_or_prompt_holding_a_marker_pages_nothing(
    forged: str, head: str, tmp_path: Path
) -> None:
    lines = vllm_request_lines(forged, head)
    assert replay_says(VLLM, lines) == []
    assert await live_says(VLLM, lines, tmp_path) == []


@pytest.mark.parametrize(
    "line",
    [
        f"(APIServer pid=697224) ERROR 12-03 16:29:00 [core.py:844] {FATAL}",  # another process
        f"(VllmWorker TP0 pid=7) ERROR 12-03 16:29:00 [core.py:844] {FATAL}",  # a worker, not EngineCore
        f"(EngineCore_DP0 pid=595868) INFO 12-03 16:29:00 [core.py:844] {FATAL}",  # not its level
        f"(EngineCore_DP0 pid=595868) ERROR 12-03 16:29:00 [serving_chat.py:1278] {FATAL}",  # not its file
        f"(EngineCore_DP0 pid=595868) ERROR 12-03 16:29:00 [core.py:844] Request x: {FATAL}",  # not its start
    ],
    ids=["api server", "worker", "info level", "other file", "mid-message"],
)
async def test_26_a_vllm_fatal_marker_outside_enginecores_position_is_not_a_crash(
    line: str, tmp_path: Path
) -> None:
    assert [s for s in replay_says(VLLM, [line]) if "scheduler_exception" in s] == []
    assert await live_says(VLLM, [line], tmp_path) == []


@pytest.mark.parametrize("forged", list(SGLANG_TEXTS.values()), ids=list(SGLANG_TEXTS))
async def test_26_an_sglang_rid_or_prompt_holding_a_marker_pages_nothing(forged: str, tmp_path: Path) -> None:
    lines = sglang_request_lines(forged)
    assert replay_says(SGLANG, lines) == []
    assert await live_says(SGLANG, lines, tmp_path) == []


async def test_26_the_genuine_crash_after_every_forgery_still_pages(tmp_path: Path) -> None:
    """Anchoring blinds nothing: after every forged line, the engine's own crash is one incident."""
    vllm = [line for forged in VLLM_IDS.values() for line in vllm_request_lines(forged)]
    vllm += vllm_genuine_crash()
    assert await live_says(VLLM, vllm, tmp_path) == ["w/dp0-tp0-pp0 scheduler_exception"]
    report, _ = replayed(VLLM, vllm)
    assert report.incidents == {IncidentKind.SCHEDULER_EXCEPTION.value: 1}

    sglang = [line for forged in SGLANG_TEXTS.values() for line in sglang_request_lines(forged)]
    sglang += sglang_genuine_crash()
    live = await live_says(SGLANG, sglang, tmp_path)
    assert sorted(live) == ["w/dp0-tp0-pp0 leak_detected", "w/dp0-tp0-pp0 scheduler_exception"]
    report, _ = replayed(SGLANG, sglang)
    assert report.incidents.get(IncidentKind.SCHEDULER_EXCEPTION.value) == 1

"""The real vLLM server on CPU of ``server.py`` and ``test_real_vllm_server.py`` with the probe's guard
on (``POOLWATCH_PROBE_GUARD=1``) and a block pool of 64 blocks (``--num-gpu-blocks-override``), so
that after the fault a few rounds of completions hand every free block out again and again.

Rounds of concurrent completions first: not one refusal, a gap of 0 and no tripwire at every read.
Then ``fault_plugin.py`` frees one finished request's blocks a second time inside EngineCore: guard
refuses it inside ``free_blocks`` (every block keeps ``ref_cnt`` >= 0, as the plugin logs), the
sidecar fires PoolwatchProbeRepaired (warning, pool ``full``) whose text names exactly the ids freed
twice, in blocks, the hook ``free_blocks`` and vLLM's lines that called the refused free, and never
PoolwatchDoubleFree, and EngineCore serves on: rounds of completions with no shared prefix take
every block of the pool many times over (without guard, vLLM's ``assert block.ref_cnt == 0`` kills
EngineCore in the first of them: docs/engines/vllm.md, *Guard*), every one completes, ``/health``
answers and the pool balances at idle. Build the venv first::

    scripts/vllm_cpu_venv.py
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rigs.stack.processes import http_ok, poll
from rigs.vllm.fault_plugin import FAULT_MAX_TOKENS, MARK
from tests.vllm_server.served import (
    PREFIX,
    REQUESTS,
    Served,
    complete,
    idle_pool,
    pool_gauges,
    published,
    serving,
)

POOL_BLOCKS = 64  # 63 usable blocks of 128 tokens; a completion here takes 4
AFTER_ROUNDS = 8  # 64 completions, about 250 block allocations: the free queue four times over


def refused_after(log: Path) -> tuple[list[int], list[int]] | None:
    """The ids the fault plugin freed twice and their ``ref_cnt`` after it (None before it did)."""
    text = log.read_text(errors="replace")
    found = re.search(re.escape(MARK) + r" \[([\d, ]+)\](?: at [\d.]+)? ref_cnt after \[([-\d, ]+)\]", text)
    if not found:
        return None
    return [int(x) for x in found[1].split(",")], [int(x) for x in found[2].split(",")]


def firing(sidecar: str) -> dict[str, dict[str, Any]]:
    """Each firing alert by name."""
    alerts = httpx.get(f"{sidecar}/api/v1/alerts", params={"state": "firing"}, timeout=5.0).json()
    return {a["name"]: a for a in alerts}


def repaired(sidecar: str) -> tuple[dict[str, Any], set[int]] | None:
    """A firing PoolwatchProbeRepaired and the block ids its text names (None before it fires)."""
    alert = firing(sidecar).get("PoolwatchProbeRepaired")
    text = alert["annotations"]["description"] if alert else ""
    found = re.search(r"block\(s\) \[([\d, ]+)\]", text)
    return (alert, {int(x) for x in found[1].split(",")}) if alert and found else None


def rounds(served: Served, n: int, *, shared: bool) -> list[dict[str, float]]:
    """``n`` rounds of concurrent completions (sharing a prompt prefix, or each its own), reading the
    sidecar's figures every 0.1 s while they run; every completion must finish."""
    reads: list[dict[str, float]] = []
    pause = threading.Event()
    with httpx.Client() as client, ThreadPoolExecutor(REQUESTS) as pool:
        for r in range(n):
            futures = [pool.submit(_one, client, served, r * REQUESTS + i, shared) for i in range(REQUESTS)]
            while not all(f.done() for f in futures):
                reads.append(pool_gauges(served.metrics))
                pause.wait(0.1)
            assert all(f.result() > 0 for f in futures)
    return reads


def _one(client: httpx.Client, served: Served, i: int, shared: bool) -> int:
    if shared:
        return complete(client, served, i)
    body = {"model": served.model, "prompt": f"{i} {PREFIX}", "max_tokens": 100, "temperature": 0}
    response = client.post(f"{served.vllm}/v1/completions", json=body | {"ignore_eos": True}, timeout=300)
    response.raise_for_status()
    tokens: int = response.json()["usage"]["completion_tokens"]
    return tokens


@pytest.mark.vllm
@pytest.mark.slow
def test_with_guard_on_a_real_double_free_is_refused_and_vllm_keeps_serving(tmp_path: Path) -> None:
    env = {"POOLWATCH_PROBE_GUARD": "1"}
    args = ("--num-gpu-blocks-override", str(POOL_BLOCKS))
    with serving(tmp_path, env=env, args=args) as served:
        with httpx.Client() as client:
            assert complete(client, served, -1) > 0
        first = poll(lambda: published(served.metrics), timeout=90, what="a pool", logs=served.logs)
        assert first["capacity"] == POOL_BLOCKS - 1, first
        clean = rounds(served, 3, shared=True)
        clean.append(
            poll(lambda: idle_pool(served.metrics), timeout=30, what="an idle pool", logs=served.logs)
        )
        assert {g["gap"] for g in clean if "gap" in g} == {0.0}
        assert max(g["tripwires"] + g["repairs"] for g in clean) == 0  # a clean run: nothing refused
        vllm_log, sidecar_log = served.logs
        with httpx.Client() as client:
            assert complete(client, served, -2, max_tokens=FAULT_MAX_TOKENS) == FAULT_MAX_TOKENS
        ids, refs = poll(lambda: refused_after(vllm_log), timeout=30, what="the double free", logs=[vllm_log])
        assert min(refs) >= 0, refs  # refused: no block went to -1
        alert, named = poll(
            lambda: repaired(served.sidecar), timeout=60, what="PoolwatchProbeRepaired", logs=[sidecar_log]
        )
        assert named == set(ids), (named, ids)
        # the page's text: the pool, what guard refused, in blocks, where, and vLLM's lines that freed
        text = alert["annotations"]["description"]
        assert alert["labels"]["pool"] == "full", alert
        assert alert["severity"] == "warning", alert
        assert f"The guard refused to free {len(ids)} blocks already free" in text, text
        assert "after free_blocks at iteration" in text, text
        assert "The refused free was called by …/" in text, text
        assert "vLLM kept serving" in text, text
        after = rounds(served, AFTER_ROUNDS, shared=False)  # the whole pool handed out again and again
        idle = poll(lambda: idle_pool(served.metrics), timeout=30, what="an idle pool", logs=served.logs)
        assert http_ok(f"{served.vllm}/health")
        assert {g["gap"] for g in [*after, idle] if "gap" in g} == {0.0}
        assert max(g["tripwires"] for g in [*after, idle]) == 0
        assert idle["repairs"] == len(ids)
        assert "PoolwatchDoubleFree" not in firing(served.sidecar)
        assert "EngineCore encountered a fatal error" not in vllm_log.read_text(errors="replace")

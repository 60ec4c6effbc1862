"""The real vLLM server on CPU with a sidecar watching it, as the server tests drive it: started
(``server.py``'s command, the fault plugin armed, ``env`` and ``args`` on top) and stopped with
:func:`serving`; the sidecar's block-pool figures read from its ``/metrics``
(:func:`pool_gauges`); completions through vLLM's OpenAI-compatible API (:func:`complete`).
Shared by ``test_real_vllm_server.py`` (guard off) and ``test_real_vllm_server_guard.py``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from rigs.stack.processes import free_port, http_ok, poll
from rigs.vllm.releases import server_venv
from rigs.vllm.server import server, start

PREFIX = " ".join(f"the quick brown fox jumps over the lazy dog {i}" for i in range(40))
REQUESTS = 8  # concurrent completions per round


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
    server_venv().need()  # a skip without it (a failure under POOLWATCH_REQUIRE_VLLM_CPU=1)
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


def complete(client: httpx.Client, served: Served, i: int, max_tokens: int = 100) -> int:
    body = {"model": served.model, "prompt": f"{PREFIX} {i}", "max_tokens": max_tokens, "temperature": 0}
    response = client.post(f"{served.vllm}/v1/completions", json=body | {"ignore_eos": True}, timeout=300)
    response.raise_for_status()
    tokens: int = response.json()["usage"]["completion_tokens"]
    return tokens

"""What an emulated worker shows the outside: SGLang-shaped ``/metrics`` text, an emulated
``/get_server_info`` JSON, and a small loopback HTTP server for both (reference §5).

``/metrics`` holds one series per emitting rank (attention-TP rank 0 unless
``enable_metrics_for_all_schedulers``), labelled ``model_name``, ``engine_type``, ``tp_rank``,
``pp_rank`` (+ ``moe_ep_rank`` from 0.5.9, + ``dp_rank`` when data-parallel); the values are the
ranks' last refreshed samples, so they are as stale as SGLang's.  After a crash the server
stops answering, as the real process would be gone.  The probe face comes from
:func:`poolwatch.probe.lifecycle.attach` (see :func:`attach_probes`); a crashed worker's probe
endpoints stop answering too.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from pathlib import Path

    from poolwatch_emulator.cluster import Cluster
    from poolwatch_emulator.scheduler import Scheduler
    from poolwatch_emulator.worker import Worker

__all__ = ["WorkerServer", "attach_probes", "metrics_text", "server_info"]

_HELP = {
    "num_running_reqs": "The number of running requests.",
    "num_used_tokens": "The number of used tokens.",
    "token_usage": "The token usage.",
    "full_token_usage": "The token usage for full attention layers.",
    "swa_token_usage": "The token usage for SWA layers.",
    "mamba_usage": "The token usage for Mamba layers.",
}


def _labels(rank: Scheduler) -> dict[str, str]:
    rel = rank.release
    engine = rank.disaggregation_mode.value if rel.engine_type_by_role else "unified"
    engine = "unified" if engine == "null" else engine
    labels = {
        "model_name": rank.server_args.model_path,
        "engine_type": engine,
        "tp_rank": str(rank.tp_rank),
        "pp_rank": str(rank.pp_rank),
    }
    if rel.name != "0.5.4.post1":
        labels["moe_ep_rank"] = "0"
    if rank.dp_size > 1:
        labels["dp_rank"] = str(rank.dp_rank)
    return labels


class _WorkerCollector(Collector):
    """Fresh gauge families from the ranks' latest samples on every collect."""

    def __init__(self, ranks: list[Scheduler]):
        self.ranks = [r for r in ranks if r.emu_emits_metrics()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        for rank in self.ranks:
            labels = _labels(rank)
            for name, value in rank.metrics_sample.items():
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = GaugeMetricFamily(
                        f"sglang:{name}",
                        _HELP.get(name, f"The {name.replace('_', ' ')}."),
                        labels=list(labels),
                    )
                fam.add_metric(list(labels.values()), float(value))
        yield from families.values()


def metrics_text(worker: Worker) -> bytes:
    """The worker's ``/metrics`` body in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_WorkerCollector(worker.ranks))
    return generate_latest(registry)


def server_info(worker: Worker) -> dict[str, Any]:
    """An emulated ``/get_server_info``: server args, version and one internal state per DP rank."""
    first = worker.ranks[0]
    args = first.server_args.to_dict()
    states = []
    for rank in worker.ranks:
        if rank.tp_rank != 0:
            continue
        state = dict(args)
        state.update(
            last_gen_throughput=rank.last_gen_throughput,
            memory_usage={
                "weight": 75.3,
                "kvcache": 9.1,
                "token_capacity": rank.max_total_num_tokens,
                "graph": 1.2,
            },
        )
        if rank.release.name != "0.5.4.post1":
            state["effective_max_running_requests_per_dp"] = rank.max_running_requests
        states.append(state)
    return {**args, "version": first.release.name, "internal_states": states}


class _Handler(BaseHTTPRequestHandler):
    worker: Worker

    def do_GET(self) -> None:
        if self.worker.crashed:  # the real server process is gone: drop the connection
            self.close_connection = True
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, metrics_text(self.worker), "text/plain; version=0.0.4; charset=utf-8")
        elif path in ("/get_server_info", "/server_info"):
            self._send(200, json.dumps(server_info(self.worker)).encode(), "application/json")
        elif path == "/health":
            self._send(200, b"", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class WorkerServer:
    """``/metrics`` and ``/get_server_info`` of one worker on 127.0.0.1 (port 0 = ephemeral)."""

    def __init__(self, worker: Worker, port: int = 0):
        handler = type("Handler", (_Handler,), {"worker": worker})
        self.worker = worker
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, daemon=True, name=f"face-{worker.name}"
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WorkerServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def attach_probes(cluster: Cluster, directory: Path, *, serve: bool = True, guard: bool = False) -> int:
    """Attach the in-process probe (``poolwatch.probe.lifecycle.attach``) to every rank; the count.  A
    ``{worker}`` in ``directory`` gives each worker its own discovery directory, as each pod has;
    ``guard`` turns on the probe's guard mode (``POOLWATCH_PROBE_GUARD=1``)."""
    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.lifecycle import attach
    from poolwatch.probe.sglang.engine import SGLANG

    for worker in cluster.workers:
        folder = str(directory).replace("{worker}", worker.name)
        version, name = cluster.release.name, worker.name
        config = ProbeConfig(directory=folder, serve=serve, worker=name, release=version, guard=guard)
        for rank in worker.ranks:
            attach(SGLANG, rank, config, serve=serve)
        worker.on_crash.append(functools.partial(probes_gone, worker))
    return len(cluster.schedulers)


def probes_gone(worker: Worker) -> None:
    """The crashed worker's process is gone: its ranks' probe endpoints stop answering.  SGLang's
    parent kills the server's process tree, so no ``atexit`` runs: the discovery files (and any
    final snapshot) stay, as on a real node, and the sidecar finds the final file when the probe
    refuses."""
    from poolwatch.probe.lifecycle import probe_of

    for rank in worker.ranks:
        server = getattr(getattr(probe_of(rank), "publisher", None), "server", None)
        if server is not None:
            server.stop()

"""Start the deployed stack's processes on 127.0.0.1 as the rendered manifests configure them:
Alertmanager with the shipped routes, Prometheus with the rendered rules and PodMonitor, and one
``poolwatch serve`` per pod with its container's environment (the e2e test, bench_page and the
vLLM page run share them)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml

from rigs.stack import deployed
from rigs.stack.processes import Process, free_port, http_ok, poll
from rigs.stack.prometheus import Prometheus, run_prometheus
from rigs.stack.receivers import WebhookRecorder
from rigs.venv import tool

PODS = {"prefill-0": "prefill", "prefill-1": "prefill", "decode-0": "decode", "decode-1": "decode"}


def start(cleanup: contextlib.ExitStack, process: Process) -> Process:
    cleanup.callback(process.stop)
    return process.start()


def pods_from_manifests(
    tmp: Path, rendered: deployed.Rendered, am_port: int, port_base: int, pods: Mapping[str, str] = PODS
) -> list[deployed.Pod]:
    """One pod per ``pods`` entry (name -> the role whose rendered workload it copies), the i-th
    pod's SGLang at ``port_base + i``."""
    out = []
    for i, (name, role) in enumerate(pods.items()):
        metadata, sidecar, namespace = rendered.sidecar(role)
        root = tmp / "pods" / name
        for mount in sidecar["volumeMounts"]:
            (root / mount["name"]).mkdir(parents=True, exist_ok=True)
        # SGLang's stdout, tee'd to the shared log volume (the emulator writes <worker>.log)
        (root / "sglang-logs" / "sglang.log").symlink_to(tmp / "sglang-logs" / f"{name}.log")
        addresses = {
            "alertmanager-operated.monitoring.svc:9093": f"127.0.0.1:{am_port}",
            "127.0.0.1:30000": f"127.0.0.1:{port_base + i}",
        }
        env = deployed.pod_env(metadata, sidecar, name, namespace)
        env = deployed.on_loopback(env, sidecar, root, addresses)
        port = free_port()
        env |= {"POOLWATCH_HOST": "127.0.0.1", "POOLWATCH_PORT": str(port)}
        assert deployed.sidecar_port(sidecar) == 9464
        out.append(deployed.Pod(name, namespace, role, root, env, deployed.image_command(), port))
    return out


def start_alertmanager(cleanup: contextlib.ExitStack, tmp: Path, hooks: WebhookRecorder) -> tuple[str, Path]:
    port = free_port()
    (tmp / "alertmanager.yml").write_text(deployed.alertmanager_config(hooks.url))
    argv = [
        tool("prometheus-alertmanager"),
        f"--config.file={tmp / 'alertmanager.yml'}",
        f"--storage.path={tmp / 'alertmanager'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    am = start(cleanup, Process("alertmanager", argv, tmp / "alertmanager.log"))
    url = f"http://127.0.0.1:{port}"
    poll(lambda: http_ok(f"{url}/-/ready"), timeout=30, what="Alertmanager", logs=[am.log])
    return url, am.log


def start_sidecar(cleanup: contextlib.ExitStack, tmp: Path, pod: deployed.Pod) -> Path:
    """``poolwatch serve`` with the pod's environment on top of this process' (PATH, the venv)."""
    log = tmp / f"sidecar-{pod.name}.log"
    process = Process(f"sidecar-{pod.name}", pod.argv, log)
    cleanup.callback(process.stop)
    with log.open("wb") as out:
        process.popen = subprocess.Popen(
            pod.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **pod.env}
        )
    return log


def start_prometheus(
    cleanup: contextlib.ExitStack,
    tmp: Path,
    rendered: deployed.Rendered,
    pods: list[deployed.Pod],
    am_port: int,
) -> tuple[Prometheus, Path]:
    """Prometheus with the rendered PrometheusRule's groups and the PodMonitor's scrape."""
    rules = tmp / "poolwatch-rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rendered.rule_groups()}, sort_keys=False))
    config = deployed.prometheus_config(pods, rendered.pod_monitor(), am_port, rules)
    prom, process = run_prometheus(cleanup, tmp, config)
    return prom, process.log

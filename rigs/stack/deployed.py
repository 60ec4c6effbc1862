"""The as-deployed stack's configuration, taken from the rendered manifests rather than written
by the test: the PD example's sidecar container (command, environment with the downward API
resolved, volume mounts), its PodMonitor, its PrometheusRule, and the Alertmanager route example.

Running them on loopback changes only what a pod's network and filesystem make different: each
volume's mount path becomes a directory of the pod under the test's directory, the Service and
container addresses (``alertmanager-operated.monitoring.svc:9093``, SGLang's ``127.0.0.1:30000``)
become the loopback ports of the local Alertmanager and the pod's emulated worker, and the sidecar
binds 127.0.0.1 on a free port instead of ``0.0.0.0:9464``.  :data:`SCALED` lists the few timers
shortened so the test runs in minutes; every other value is the shipped one.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rigs.stack.manifests import Doc, container, kustomize, of_kind, workloads
from rigs.venv import ROOT

PD = "deploy/kubernetes/examples/pd"
ROUTES = ROOT / "deploy/alertmanager/alertmanager.yaml"
POOLWATCH = [sys.executable, "-m", "poolwatch.cli"]
# Alertmanager waits 5 m between two notifications of a group (so a resolution would arrive after
# the test), Prometheus scrapes every 15 s and evaluates every 30 s: scaled down here
SCALED = {"group_interval": "5s", "scrape_interval": "1s", "evaluation_interval": "1s"}
_FIELD = re.compile(r"metadata\.labels\['(.+)'\]")


@dataclass(frozen=True)
class Pod:
    """One emulated SGLang pod: its name, namespace, role and the sidecar's process."""

    name: str
    namespace: str
    role: str
    root: Path  # the pod's volumes live under here
    env: dict[str, str]
    argv: list[str]
    port: int


@dataclass(frozen=True)
class Rendered:
    """What the test takes from the manifests."""

    docs: list[Doc]

    def sidecar(self, role: str) -> tuple[Doc, Doc, str]:
        """(pod template metadata, the sidecar container, namespace) of the workload of ``role``."""
        for w in workloads(self.docs):
            metadata = w["spec"]["template"]["metadata"]
            if role in metadata["labels"].values():
                spec = w["spec"]["template"]["spec"]
                return metadata, container(spec, "poolwatch", init=True), w["metadata"]["namespace"]
        raise AssertionError(f"no workload of role {role} in {PD}")

    def rule_groups(self) -> list[dict[str, Any]]:
        (rule,) = of_kind(self.docs, "PrometheusRule")
        groups: list[dict[str, Any]] = rule["spec"]["groups"]
        return groups

    def pod_monitor(self) -> Doc:
        (monitor,) = of_kind(self.docs, "PodMonitor")
        return monitor


def render() -> Rendered:
    return Rendered(kustomize(PD))


def image_command() -> list[str]:
    """The sidecar image's CMD (the manifest sets no command), run from this checkout."""
    line = next(x for x in (ROOT / "Dockerfile").read_text().splitlines() if x.startswith("CMD "))
    cmd: list[str] = json.loads(line.removeprefix("CMD "))
    assert cmd[0] == "poolwatch", cmd
    return [*POOLWATCH, *cmd[1:]]


def pod_env(metadata: Doc, sidecar: Doc, pod: str, namespace: str) -> dict[str, str]:
    """The sidecar's environment as the kubelet sets it for ``pod``."""
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    env = {}
    for var in sidecar.get("env", []):
        ref = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if ref is None:
            env[var["name"]] = var["value"]
        elif (label := _FIELD.fullmatch(ref)) is not None:
            env[var["name"]] = metadata["labels"][label[1]]
        else:
            env[var["name"]] = fields[ref]
    return env


def on_loopback(env: dict[str, str], sidecar: Doc, root: Path, addresses: dict[str, str]) -> dict[str, str]:
    """``env`` with every mount path moved under ``root/<volume>`` and every address mapped."""
    mounts = {m["mountPath"]: str(root / m["name"]) for m in sidecar["volumeMounts"]}
    paths = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    under_mount = re.compile(rf"(^|,)({paths})(?=/|$|,)")
    out = {}
    for name, value in env.items():
        moved = under_mount.sub(lambda m: m[1] + mounts[m[2]], value)  # one pass: no path moved twice
        for address, local_address in addresses.items():
            moved = moved.replace(address, local_address)
        out[name] = moved
    return out


def sidecar_port(sidecar: Doc) -> int:
    (port,) = sidecar["ports"]
    value: int = port["containerPort"]
    return value


def alertmanager_config(recorder_url: str, smtp: str = "") -> str:
    """The route example with every integration pointed at loopback recorders: webhooks at
    ``<url>/<receiver>``, Slack at ``<url>/slack/<receiver>``, PagerDuty at
    ``<url>/pagerduty/<receiver>``, email at the SMTP recorder ``smtp`` (host:port; without one the
    email integration is left out), and :data:`SCALED`'s ``group_interval``; routes, grouping,
    waits, inhibit rules and every template unchanged."""
    doc = yaml.safe_load(ROUTES.read_text())
    for receiver in doc["receivers"]:
        name = receiver["name"]
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{recorder_url}/{name}"
        for slack in receiver.get("slack_configs", []):
            slack["api_url"] = f"{recorder_url}/slack/{name}"
        for pd in receiver.get("pagerduty_configs", []):
            pd["url"] = f"{recorder_url}/pagerduty/{name}"
        if "email_configs" in receiver and not smtp:
            del receiver["email_configs"]
        for mail in receiver.get("email_configs", []):
            mail["smarthost"], mail["require_tls"] = smtp, False
    stack = [doc["route"]]
    while stack:
        route = stack.pop()
        if "group_interval" in route:
            route["group_interval"] = SCALED["group_interval"]
        stack.extend(route.get("routes", []))
    return yaml.safe_dump(doc, sort_keys=False)


def prometheus_config(pods: list[Pod], monitor: Doc, alertmanager_port: int, rules: Path) -> str:
    """Scrape each pod's sidecar as prometheus-operator does for the PodMonitor (its path and the
    target labels it adds), evaluate the rendered rules, alert to the local Alertmanager."""
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    job = f"{pods[0].namespace}/{monitor['metadata']['name']}"
    targets = [
        {
            "targets": [f"127.0.0.1:{p.port}"],
            "labels": {
                "namespace": p.namespace,
                "pod": p.name,
                "container": "poolwatch",
                "endpoint": endpoint["port"],
                "job": job,
            },
        }
        for p in pods
    ]
    doc = {
        "global": {
            "scrape_interval": SCALED["scrape_interval"],
            "scrape_timeout": SCALED["scrape_interval"],
            "evaluation_interval": SCALED["evaluation_interval"],
        },
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            {
                "job_name": f"podMonitor/{job}/0",
                "metrics_path": endpoint["path"],
                "honor_labels": False,
                "static_configs": targets,
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)

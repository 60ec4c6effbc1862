"""Real Prometheus and Alertmanager for the stack on loopback: their configurations for a test's
sidecars, a ready Alertmanager, and Prometheus' query API."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from rigs.stack.processes import Process, free_port, http_ok, poll
from rigs.venv import tool

__all__ = [
    "Prometheus",
    "Scraped",
    "alertmanager_config",
    "prometheus_config",
    "run_alertmanager",
    "run_prometheus",
]


def _serve(
    cleanup: contextlib.ExitStack, directory: Path, name: str, config: str, *flags: str
) -> tuple[str, Process]:
    """The Prometheus-family server ``name`` (its Debian command) with ``config`` on a loopback port,
    its files in ``directory``, stopped by ``cleanup``: its URL once ready, and its process."""
    stem = "am" if name == "prometheus-alertmanager" else "prometheus"
    port = free_port()
    (directory / f"{stem}.yml").write_text(config)
    argv = [
        tool(name),
        f"--config.file={directory / f'{stem}.yml'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    process = Process(stem, [*argv, *flags], directory / f"{stem}.log")
    cleanup.callback(process.stop)
    process.start()
    url = f"http://127.0.0.1:{port}"
    poll(lambda: http_ok(f"{url}/-/ready"), timeout=30, what=name, logs=[process.log])
    return url, process


def run_alertmanager(cleanup: contextlib.ExitStack, directory: Path, config: str) -> tuple[str, Process]:
    """A real Alertmanager with ``config`` (``directory/am.yml``, its data in ``directory/am``),
    stopped by ``cleanup``: its URL once ready, and its process."""
    # --cluster.listen-address= : else its gossip binds 0.0.0.0:9094
    return _serve(
        cleanup,
        directory,
        "prometheus-alertmanager",
        config,
        f"--storage.path={directory / 'am'}",
        "--cluster.listen-address=",
    )


def run_prometheus(cleanup: contextlib.ExitStack, directory: Path, config: str) -> tuple[Prometheus, Process]:
    """A real Prometheus with ``config`` (``directory/prometheus.yml``; alerts resent every second),
    stopped by ``cleanup``: its query API once ready, and its process."""
    url, process = _serve(
        cleanup,
        directory,
        "prometheus",
        config,
        f"--storage.tsdb.path={directory / 'prometheus'}",
        "--rules.alert.resend-delay=1s",
    )
    return Prometheus(url), process


def alertmanager_config(webhook_url: str) -> str:
    """Every alert to the webhook, each alone (``group_by: [...]``) and at once: the project's
    routing waits 10 s and groups for 5 m, which would hide the second path's alert."""
    doc = {
        "route": {
            "receiver": "hook",
            "group_by": ["..."],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class Scraped:
    """A sidecar Prometheus scrapes, with the labels a PodMonitor would give it."""

    port: int
    pod: str
    namespace: str


def prometheus_config(sidecars: Sequence[Scraped], alertmanager_port: int, rules: Path) -> str:
    """Scrape every sidecar each second, evaluate the generated rules each second, alert to AM."""
    doc = {
        "global": {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
            # Prometheus adds these to the alerts it sends (not to its series): the test can tell
            # its copy from the sidecar's, which otherwise carries the very same labels
            "external_labels": {"prometheus": "e2e"},
        },
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            {
                "job_name": "poolwatch",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{s.port}"],
                        "labels": {"namespace": s.namespace, "pod": s.pod, "container": "poolwatch"},
                    }
                    for s in sidecars
                ],
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class Prometheus:
    """The query API of a running Prometheus."""

    url: str

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        response = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10.0)
        body: dict[str, Any] = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus rejected {expr!r}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        response = httpx.get(f"{self.url}/api/v1/label/{label}/values", params=params, timeout=10.0)
        body: dict[str, Any] = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus rejected label_values({match}, {label}): {body.get('error')}")
        values: list[str] = body["data"]
        return values

"""A vLLM leak and a vLLM double free, paged with vLLM-true severity and words through the stack as
deployed: the rendered vLLM example's sidecar (``deploy/kubernetes/examples/vllm``, its container's
environment on loopback), real Prometheus with the example's PrometheusRule and PodMonitor, real
Alertmanager with the shipped routes, inhibit rules and templates, every receiver a loopback recorder.

In EngineCore's place, the real vLLM probe (release 0.33.0) on the stand-in scheduler of
``rigs/fakes/vllm.py`` writes what it proves into a snapshot file the sidecar reads
(``POOLWATCH_SNAPSHOT_FILES``): rank ``vllm-0`` lost three blocks (a request the scheduler forgot,
its blocks never returned: ``missing``, idle), rank ``vllm-1`` freed one request's blocks twice
(``negative_ref``: reference counts below zero).  What a real vLLM server pages is
``tests/vllm_server/test_vllm_page.py``.

What the receivers must get:

* PoolwatchSlotLeak for ``vllm-0`` as a *warning* (a ticket), saying nothing will fail and the blocks
  stay out of use until a restart; PoolwatchDoubleFree for ``vllm-1`` *critical*, naming the
  assertion at the next allocation; counts in blocks; no text, Slack title or PagerDuty summary
  promising a crash at an idle moment;
* Prometheus' rule copies of both, with the same severity (so the sidecar's copy inhibits them: held
  ``suppressed``), the vLLM rules' words and their ``engine="vllm"`` label.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers import SteppingClock

from poolwatch.artifacts.notification_text import CRASH_PATTERN
from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from rigs.fakes.vllm import Scheduler
from rigs.stack import deployed
from rigs.stack.launch import start_alertmanager, start_prometheus, start_sidecar
from rigs.stack.manifests import kustomize
from rigs.stack.processes import free_port, http_ok, poll
from rigs.stack.prometheus import Prometheus
from rigs.stack.receivers import WebhookRecorder
from rigs.vllm.pod import EXAMPLE, example_pod

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LEAK, DOUBLE = "PoolwatchSlotLeak", "PoolwatchDoubleFree"
LEAKING, FREED_TWICE = "vllm-0", "vllm-1"  # the two ranks' workers


def _census(sched: Scheduler, worker: str, act: Any) -> Snapshot:
    """The probe's census of ``sched`` after ``act(sched)``, balanced before it."""
    config = ProbeConfig(serve=False, sample_interval_s=0.01)
    probe = new_probe(
        VLLM,
        sched,
        config,
        release=vllm_release("0.33.0"),
        environ={"POOLWATCH_WORKER": worker},
        clock=SteppingClock(),
    )
    assert probe.sample_now(census=True) is not None  # the first idle census balances: exact from now
    act(sched)
    snap = probe.sample_now(census=True)
    assert snap is not None
    return snap


def _forget_a_request(sched: Scheduler) -> None:
    sched.add("aborted", 3)
    del sched.requests["aborted"]  # the scheduler forgets it; its blocks are never returned
    sched.running = []


def _free_twice(sched: Scheduler) -> None:
    blocks = sched.add("twice", 2)
    sched.finish("twice")
    sched.pool.free_blocks(blocks)  # the same list again: reference counts below zero


def vllm_snapshots(path: Path) -> list[Snapshot]:
    snaps = [
        _census(Scheduler(256), LEAKING, _forget_a_request),
        _census(Scheduler(256), FREED_TWICE, _free_twice),
    ]
    path.write_text(json.dumps({"snapshots": [dump_snapshot(s) for s in snaps]}), encoding="utf-8")
    return snaps


@dataclass
class Stack:
    hooks: WebhookRecorder
    alertmanager: str
    prometheus: Prometheus
    logs: list[Path]

    def received(self, alertname: str, worker: str) -> list[dict[str, Any]]:
        """Every firing copy of the alert for ``worker`` a webhook receiver got."""
        out = []
        for post in list(self.hooks.posts):
            if "/slack/" in post.path or "/pagerduty/" in post.path:
                continue
            for alert in post.body.get("alerts", []):
                labels = alert["labels"]
                if (labels["alertname"], labels.get("worker"), alert["status"]) == (
                    alertname,
                    worker,
                    "firing",
                ):
                    out.append(alert)
        return out

    def chat(self, kind: str) -> list[dict[str, Any]]:
        return [p.body for p in list(self.hooks.posts) if f"/{kind}/" in p.path]

    def held(self, alertname: str, worker: str, path: str) -> list[dict[str, Any]]:
        """The copies of the alert Alertmanager holds for ``worker`` from one path."""
        body: list[dict[str, Any]] = httpx.get(f"{self.alertmanager}/api/v2/alerts", timeout=10).json()
        return [
            a
            for a in body
            if a["labels"]["alertname"] == alertname
            and a["labels"].get("worker") == worker
            and a["labels"].get("poolwatch_path") == path
        ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    rendered = deployed.Rendered(kustomize(EXAMPLE))
    snapshots = tmp_path / "vllm-snapshots.json"
    vllm_snapshots(snapshots)
    with contextlib.ExitStack() as cleanup:
        hooks = WebhookRecorder()
        cleanup.callback(hooks.stop)
        am_url, am_log = start_alertmanager(cleanup, tmp_path, hooks)
        am_port = int(am_url.rsplit(":", 1)[1])
        example = example_pod(tmp_path, rendered, am_port, free_port())
        pod = replace(
            example.sidecar, env={**example.sidecar.env, "POOLWATCH_SNAPSHOT_FILES": str(snapshots)}
        )
        logs = [am_log, start_sidecar(cleanup, tmp_path, pod)]
        ready = functools.partial(http_ok, f"http://127.0.0.1:{pod.port}/readyz")
        poll(ready, timeout=60, what="the sidecar", logs=logs)
        prom, prom_log = start_prometheus(cleanup, tmp_path, rendered, [pod], am_port)
        yield Stack(hooks, am_url, prom, [*logs, prom_log])


def _no_crash_promised(text: str) -> None:
    assert not re.search(CRASH_PATTERN, text, re.I), text
    assert "WILL CRASH" not in text, text
    assert "SGLang" not in text, text


def test_a_vllm_leak_and_double_free_page_what_vllm_will_do_on_both_paths(stack: Stack) -> None:
    # the sidecar's copies: the double free pages at once, the leak is a ticket after group_wait
    expected = (  # alert, worker, seconds to wait, severity, what its description says
        (
            DOUBLE,
            FREED_TWICE,
            60,
            "critical",
            "Tripwire negative_ref: 2 blocks",
            "fails vLLM's assertion when it is next allocated: the engine exits",
        ),
        (
            LEAK,
            LEAKING,
            90,
            "warning",
            "Tripwire missing: 3 blocks",
            "vLLM has no idle check of its own, so nothing will fail",
        ),
    )
    for name, worker, wait, severity, *says in expected:
        (got,) = poll(
            lambda n=name, w=worker: stack.received(n, w) or None, timeout=wait, what=name, logs=stack.logs
        )[:1]
        assert got["labels"]["severity"] == severity
        text = got["annotations"]["description"]
        assert all(said in text for said in says), text
        _no_crash_promised(text)

    # what the chat and the pager show: the shipped templates, no crash headline
    for body in stack.chat("slack"):
        attachment = body["attachments"][0]
        _no_crash_promised(attachment["title"] + attachment["text"])
    for event in stack.chat("pagerduty"):
        _no_crash_promised(event["payload"]["summary"])
    assert any(LEAK in b["attachments"][0]["title"] for b in stack.chat("slack"))

    # Prometheus' copies: vLLM's rules, the same severity, so the sidecar's copies silence them
    def rule_copies() -> tuple[dict[str, Any], dict[str, Any]] | None:
        leaks, doubles = stack.held(LEAK, LEAKING, "rules"), stack.held(DOUBLE, FREED_TWICE, "rules")
        return (leaks[0], doubles[0]) if leaks and doubles else None

    rule_leak, rule_double = poll(rule_copies, timeout=150, what="the rule copies", logs=stack.logs)
    for copy, severity in ((rule_leak, "warning"), (rule_double, "critical")):
        assert copy["labels"]["severity"] == severity, copy
        assert copy["labels"]["engine"] == "vllm", copy
        assert copy["status"]["state"] == "suppressed", copy
        _no_crash_promised(copy["annotations"]["description"])
    assert "block(s) of the full pool on vllm-0" in rule_leak["annotations"]["description"]
    assert "so nothing will fail" in rule_leak["annotations"]["description"]
    assert "fails vLLM's assertion when it is next allocated" in rule_double["annotations"]["description"]

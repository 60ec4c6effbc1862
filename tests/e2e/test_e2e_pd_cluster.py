"""End to end with the real tools: an emulated PD cluster (2 prefill + 2 decode workers, TP 2, SGLang
0.5.4.post1) where the seed double free strikes, a ``poolwatch serve`` sidecar per worker, a real
Prometheus scraping them with the generated rules, a real Alertmanager, and a webhook receiver.

Both paths page before SGLang's own idle check crashes the worker: the sidecar's direct alert
(sidecar -> Alertmanager) and the Prometheus rule alert (Prometheus -> Alertmanager); and the
generated dashboards' queries return data from that Prometheus.

Timing: the emulator runs 5 simulated seconds per wall second under heavy traffic (prompts chunked
at 256 tokens), so the prefill worker stays busy for about a minute of simulated time after the
fault at 30 s and SGLang's idle check only runs (and crashes it) then.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import re
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.grafana import PanelQuery, load, panel_queries, resolve_variables, substitute
from tests.helpers import REPO

from rigs.stack.processes import LogWatcher, Process, free_port, http_ok, poll
from rigs.stack.prometheus import (
    Prometheus,
    Scraped,
    alertmanager_config,
    prometheus_config,
    run_alertmanager,
    run_prometheus,
)
from rigs.stack.receivers import WebhookRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAMESPACE = "poolwatch-e2e"
WORKERS = {"prefill-0": "prefill", "prefill-1": "prefill", "decode-0": "decode", "decode-1": "decode"}
TIME_SCALE = 5.0
FAULT_AT = 30.0  # simulated seconds
EMULATOR_ARGS = [
    *("--prefill", "2", "--decode", "2", "--tp", "2", "--version", "0.5.4.post1"),
    *("--fault", f"pd-chunked-mamba-double-free@{FAULT_AT:g}s", "--chunked-prefill-size", "256"),
    *("--rate", "8", "--seed", "0", "--time-scale", f"{TIME_SCALE:g}"),
]
CRASH = "Scheduler hit an exception"
POOLWATCH = [sys.executable, "-m", "poolwatch.cli"]
# panels that hold data only in other situations (a leak trend, a log source, SGLang's own log)
MAY_BE_EMPTY = {
    "Leak rate per rank",  # a double free is no leak: no leak rate
    "Time to exhaustion",  # nor a forecast
    "Leak rate by role",
    "Incidents logged",  # the sidecars here follow probes, not SGLang's log
    "Scrape errors by reason",  # no scrape failed yet
    "Slots lost and counted twice by role",  # nothing is lost here, only counted twice
    "Exact against coarse figures",  # every pool is exact: no coarse line
    "Probe errors contained",  # no probe's kill switch is engaged
    "Sidecar task crashes and internal errors",  # nothing crashed
    "Probe guard repairs and dropped tripwires",  # the guard is off; no tripwire was dropped
    # absent while there is nothing to say (catalog/waiting.py): no engine counter is off from the census,
    "Counter drift per rank",
    # no owner waits on a transfer or a lock at the seed's moment,
    "Held by owners waiting on a transfer or a lock",
    "Oldest hold's wait against the engine's bound",
    # and SGLang's scheduler has no preemption count (vLLM's only)
    "Preemptions per rank",
}


@dataclass
class Stack:
    directory: Path
    webhook: WebhookRecorder
    prometheus: Prometheus
    emulator_log: Path
    crashes: LogWatcher
    started: LogWatcher
    logs: list[Path]


def start(cleanup: contextlib.ExitStack, process: Process) -> Process:
    cleanup.callback(process.stop)
    return process.start()


def serve_args(worker: str, role: str, port: int, probe_dir: Path, alertmanager: str) -> list[str]:
    return [
        *POOLWATCH,
        "serve",
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
        *("--probe-dir", str(probe_dir), "--probe-workers", worker),
        *("--worker", worker, "--role", role, "--namespace", NAMESPACE),
        *("--alertmanager-urls", alertmanager),
    ]


def start_prometheus(
    cleanup: contextlib.ExitStack, directory: Path, sidecars: list[Scraped], alertmanager: str
) -> Prometheus:
    rules = REPO / "deploy" / "prometheus" / "poolwatch-rules.yml"
    am_port = int(alertmanager.rsplit(":", 1)[1])
    prom, process = run_prometheus(cleanup, directory, prometheus_config(sidecars, am_port, rules))

    def all_up() -> bool | None:
        return True if len(prom.query('up{job="poolwatch"} == 1')) == len(sidecars) else None

    poll(all_up, timeout=60, what="Prometheus to scrape every sidecar", logs=[process.log])
    return prom


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    probe_dir, log_dir = tmp_path / "probes", tmp_path / "logs"
    with contextlib.ExitStack() as cleanup:
        webhook = WebhookRecorder()
        cleanup.callback(webhook.stop)
        alertmanager, _ = run_alertmanager(cleanup, tmp_path, alertmanager_config(webhook.url))
        sidecars = []
        for worker, role in WORKERS.items():
            port = free_port()
            argv = serve_args(worker, role, port, probe_dir, alertmanager)
            process = start(cleanup, Process(f"sidecar-{worker}", argv, tmp_path / f"sidecar-{worker}.log"))
            healthz = functools.partial(http_ok, f"http://127.0.0.1:{port}/healthz")
            poll(healthz, timeout=60, what=f"the sidecar of {worker}", logs=[process.log])
            sidecars.append(Scraped(port, worker, NAMESPACE))
        prometheus = start_prometheus(cleanup, tmp_path, sidecars, alertmanager)
        emulator_log = tmp_path / "emulator.log"
        dirs = ["--probe-dir", str(probe_dir), "--log-dir", str(log_dir)]
        argv = [*POOLWATCH, "emulate", *EMULATOR_ARGS, *dirs]
        started = LogWatcher({"emulator": emulator_log}, "probes:")
        cleanup.callback(started.stop)
        start(cleanup, Process("emulator", argv, emulator_log, stop_signal=signal.SIGINT))
        crashes = LogWatcher({w: log_dir / f"{w}.log" for w in WORKERS}, CRASH)
        cleanup.callback(crashes.stop)
        logs = sorted(tmp_path.glob("*.log"))
        yield Stack(tmp_path, webhook, prometheus, emulator_log, crashes, started, logs)


Alert = dict[str, Any]


def from_prometheus(alert: Alert) -> bool:
    return "prometheus" in alert["labels"]  # Prometheus' external label; the rules drop job and instance


def double_frees(stack: Stack, prometheus: bool, worker: str = "") -> list[tuple[float, Alert]]:
    """(arrival, alert) of the double-free pages from one path (of ``worker`` if given)."""
    return [
        (t, a)
        for t, a in stack.webhook.firing()
        if a["labels"]["alertname"] == "PoolwatchDoubleFree"
        and from_prometheus(a) == prometheus
        and a["labels"]["worker"] == (worker or a["labels"]["worker"])
    ]


def first_of(stack: Stack, prometheus: bool, worker: str = "") -> Callable[[], tuple[float, Alert] | None]:
    return lambda: next(iter(double_frees(stack, prometheus, worker)), None)


def expected_labels(worker: str) -> dict[str, str]:
    return {
        "alertname": "PoolwatchDoubleFree",
        "severity": "critical",
        "pool": "mamba",
        "role": "prefill",
        "worker": worker,
        "dp_rank": "0",
        "pp_rank": "0",
        "namespace": NAMESPACE,
    }


def starts_at(alert: Alert) -> float:
    text = re.sub(r"(\.\d{6})\d+", r"\1", alert["startsAt"]).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text).timestamp()


def test_the_seed_double_free_pages_through_the_sidecar_and_prometheus_before_sglang_crashes(
    stack: Stack,
) -> None:
    logs = stack.logs + sorted((stack.directory / "logs").glob("*.log"))
    direct_at, direct = poll(first_of(stack, False), timeout=150, what="the sidecar's alert", logs=logs)
    worker = direct["labels"]["worker"]
    rule_at, rule = poll(first_of(stack, True, worker), timeout=150, what="Prometheus' alert", logs=logs)
    poll(lambda: stack.crashes.seen or None, timeout=240, what="the emulated idle-check crash", logs=logs)

    tp_rank = direct["labels"]["tp_rank"]
    labels = dict(direct["labels"])
    assert re.fullmatch("[0-9a-f]{8}", labels.pop("poolwatch_detail"))  # a digest of the cause
    assert labels == {**expected_labels(worker), "tp_rank": tp_rank, "poolwatch_path": "sidecar"}
    assert direct["labels"]["tp_rank"] in ("0", "1")
    assert expected_labels(worker).items() <= rule["labels"].items()
    assert rule["labels"]["poolwatch_path"] == "rules"  # which path sent it (docs/alerting.md)
    assert rule["labels"]["prometheus"] == "e2e"
    assert not {"job", "instance", "container"} & set(rule["labels"]), (
        "the rules keep only what the sidecar says"
    )
    assert rule["labels"]["tp_rank"] in ("0", "1")
    assert set(stack.crashes.seen) <= {w for w, role in WORKERS.items() if role == "prefill"}
    for crashed, crashed_at in stack.crashes.seen.items():
        paged = [t for t, _ in double_frees(stack, False, crashed)]
        assert paged, f"{crashed} crashed without a page from its sidecar"
        assert min(paged) < crashed_at, f"{crashed}: paged {min(paged) - crashed_at:+.1f} s after its crash"

    fault_at = stack.started.seen["emulator"] + FAULT_AT / TIME_SCALE
    crash_at = min(stack.crashes.seen.values())
    print(
        f"\nwall seconds after the fault (time scale {TIME_SCALE:g}): "
        f"sidecar page {direct_at - fault_at:.1f}, Prometheus page {rule_at - fault_at:.1f}, "
        f"crash {crash_at - fault_at:.1f}"
    )
    check_dashboards(stack.prometheus, rule)


def check_dashboards(prom: Prometheus, alert: Alert) -> None:
    """Every panel of both dashboards, with the variables set to the paged rank, answers at the time
    Prometheus fired; the core ones (and all but :data:`MAY_BE_EMPTY`) with data."""
    at = starts_at(alert)
    labels = alert["labels"]
    chosen = {
        k: labels[k] for k in ("namespace", "pod", "worker", "role", "dp_rank", "tp_rank", "pp_rank", "pool")
    }
    empty: list[PanelQuery] = []
    answered = 0
    for path in sorted((REPO / "dashboards").glob("*.json")):
        doc = load(path)
        values = resolve_variables(doc, prom, chosen, at - 120, at)
        for query in panel_queries(path.stem, doc):
            answered += 1
            if not prom.query(substitute(query.expr, values), at=at):
                empty.append(query)
    assert answered >= 20
    core = {"Conservation gap", "$pool pool: slots by state against capacity", "Targets up"}
    assert not [q for q in empty if q.title in core], empty
    assert [q for q in empty if q.title not in MAY_BE_EMPTY] == []

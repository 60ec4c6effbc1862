"""End to end as deployed: the PD example's rendered sidecar configuration, PodMonitor and
PrometheusRule, and the Alertmanager route example, run against an emulated PD cluster (2 prefill +
2 decode pods, TP 2, SGLang 0.5.4.post1) with real Prometheus and real Alertmanager.

The story of one incident, checked at every step against Alertmanager, the webhook receivers
and the fleet dashboard's "Imbalanced pools" query:

1. the seed double free strikes a busy prefill pod: exactly one page per incident, the sidecar's
   exact copy (Prometheus' rule copy of the same alert is there too, inhibited by it; Slack and
   PagerDuty get the shipped templates' text),
   naming the pod and the rank, before SGLang's idle check crashes the pod;
2. the crash: PoolwatchSchedulerCrashed pages; the crashed pod's stale-snapshot alerts fire and
   are inhibited (no notification), its double free stays firing on both paths;
3. the restart (a new emulator process, no fault): every alert resolves, nothing pages again.

See :mod:`tests.e2e.deployed` for what is taken from the manifests and the few timers scaled.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.grafana import load, panel_queries, substitute
from tests.helpers import REPO

from poolwatch.notify.paths import DETAIL_LABEL, DIRECT, PATH_LABEL, RULES
from rigs.stack import deployed
from rigs.stack.launch import PODS, pods_from_manifests, start_alertmanager, start_prometheus, start_sidecar
from rigs.stack.processes import LogWatcher, Process, free_ports, http_ok, poll
from rigs.stack.prometheus import Prometheus
from rigs.stack.receivers import WebhookRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TIME_SCALE = 4.0
FAULT_AT = 30.0  # simulated seconds
EMULATOR = [
    *("--prefill", "2", "--decode", "2", "--tp", "2", "--version", "0.5.4.post1"),
    *("--chunked-prefill-size", "256", "--rate", "8", "--seed", "0", "--time-scale", f"{TIME_SCALE:g}"),
]
FAULT = ["--fault", f"pd-chunked-mamba-double-free@{FAULT_AT:g}s"]
CRASH = "Scheduler hit an exception"
CONSERVATION = {"PoolwatchDoubleFree", "PoolwatchSlotLeak"}
STALE = "PoolwatchSnapshotStale"
# the crash inhibits these alerts of its worker (deploy/alertmanager/alertmanager.yaml)
INHIBITED = {STALE, "PoolwatchTargetDown", "PoolwatchProbeDegraded"}
RANK = ("namespace", "pod", "worker", "role", "dp_rank", "tp_rank", "pp_rank")

Alert = dict[str, Any]


@dataclass
class Deployed:
    directory: Path
    pods: list[deployed.Pod]
    hooks: WebhookRecorder
    prometheus: Prometheus
    alertmanager: str
    cleanup: contextlib.ExitStack
    port_base: int
    logs: list[Path] = field(default_factory=list)
    emulator: Process | None = None

    def start_emulator(self, run: str, fault: bool) -> float:
        """Start the emulated cluster (a restart when it ran before); returns the wall start."""
        argv = [
            *deployed.POOLWATCH,
            "emulate",
            *EMULATOR,
            *(FAULT if fault else ()),
            *("--port-base", str(self.port_base)),
            *("--probe-dir", self.probe_dir()),
            *("--log-dir", str(self.directory / "sglang-logs")),
        ]
        log = self.directory / f"emulator-{run}.log"
        self.logs.append(log)
        started = time.time()
        self.emulator = Process(f"emulator-{run}", argv, log, stop_signal=signal.SIGINT)
        self.cleanup.callback(self.emulator.stop)
        self.emulator.start()
        poll(lambda: "probes:" in log.read_text() or None, timeout=60, what="the emulator", logs=self.logs)
        urls = dict(
            line.split(": ", 1) for line in log.read_text().splitlines() if line.startswith(tuple(PODS))
        )
        for i, pod in enumerate(p.name for p in self.pods):
            assert urls[pod].startswith(f"http://127.0.0.1:{self.port_base + i}/"), (pod, urls[pod])
        return started

    def probe_dir(self) -> str:
        """The probes' directory as the manifests give it to the sidecar (``POOLWATCH_PROBE_DIR``,
        moved under each pod's volumes), with the pod's name as the emulator's ``{worker}``."""
        templates = {p.env["POOLWATCH_PROBE_DIR"].replace(p.name, "{worker}") for p in self.pods}
        (template,) = templates
        return template

    def alerts(self) -> list[Alert]:
        """Every Poolwatch alert Alertmanager holds now (active, inhibited or silenced)."""
        body = httpx.get(f"{self.alertmanager}/api/v2/alerts", timeout=10).json()
        return [a for a in body if a["labels"]["alertname"].startswith("Poolwatch")]

    def pages(self) -> list[tuple[float, dict[str, Any]]]:
        """What the receivers' webhooks got (the Slack and PagerDuty bodies are :meth:`chat`)."""
        return [(p.received_at, p.body) for p in self.hooks.posts if "alerts" in p.body]

    def chat(self, kind: str) -> list[tuple[float, str, dict[str, Any]]]:
        """(arrival, receiver, body) of every Slack or PagerDuty message the recorder got."""
        marker = f"/{kind}/"
        return [
            (p.received_at, p.path.partition(marker)[2], p.body) for p in self.hooks.posts if marker in p.path
        ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Deployed]:
    rendered = deployed.render()
    with contextlib.ExitStack() as cleanup:
        hooks = WebhookRecorder()
        cleanup.callback(hooks.stop)
        kept = tmp_path / "notifications.json"  # what the receivers got, for a failure's post-mortem
        cleanup.callback(lambda: kept.write_text(json.dumps(hooks.posts, default=vars)))
        am_url, am_log = start_alertmanager(cleanup, tmp_path, hooks)
        am_port, port_base = int(am_url.rsplit(":", 1)[1]), free_ports(len(PODS))
        pods = pods_from_manifests(tmp_path, rendered, am_port, port_base)
        logs = [am_log] + [start_sidecar(cleanup, tmp_path, p) for p in pods]
        for pod in pods:
            ready = functools.partial(http_ok, f"http://127.0.0.1:{pod.port}/readyz")
            poll(ready, timeout=60, what=f"the sidecar of {pod.name}", logs=logs)
            assert serves(pod) == pod.name, f"{pod.name}'s address answers as another pod's sidecar"
        prom, prom_log = start_prometheus(cleanup, tmp_path, rendered, pods, am_port)
        yield Deployed(tmp_path, pods, hooks, prom, am_url, cleanup, port_base, [*logs, prom_log])


def serves(pod: deployed.Pod) -> str:
    """The pod the sidecar at ``pod``'s address says it serves (``poolwatch_sidecar_info``): ready
    is not enough, the one that answers must be this pod's (issue 34's cold CI run: two sidecars
    were given one port, and one answered for both)."""
    body = httpx.get(f"http://127.0.0.1:{pod.port}/metrics", timeout=10).text
    (found,) = re.findall(r'^poolwatch_sidecar_info\{sidecar_pod="([^"]*)"\} 1\.0$', body, re.M)
    return found


# --- what the on-call engineer would see -----------------------------------------------------


def imbalanced_query() -> str:
    """The fleet dashboard's "Imbalanced pools" stat, every variable set to all."""
    doc = load(REPO / "dashboards" / "poolwatch-fleet.json")
    (query,) = [q for q in panel_queries("fleet", doc) if q.title == "Imbalanced pools"]
    values = {v["name"]: ".*" for v in doc["templating"]["list"]}
    return substitute(query.expr, values)


def dashboard_count(prom: Prometheus) -> int:
    (sample,) = prom.query(imbalanced_query())
    return int(float(sample["value"][1]))


def firing_pools(alerts: list[Alert]) -> set[tuple[str, ...]]:
    """The pools Alertmanager holds a firing conservation alert for (both paths merged)."""
    return {
        tuple(a["labels"].get(k, "") for k in (*RANK, "pool"))
        for a in alerts
        if a["labels"]["alertname"] in CONSERVATION and a["status"]["state"] != "unprocessed"
    }


def dashboard_agrees(stack: Deployed, step: str) -> None:
    """At this step the dashboard counts exactly the pools Alertmanager has conservation alerts
    for (given a few scrapes and evaluations to catch up)."""

    seen: list[str] = []

    def agree() -> tuple[int, int] | None:
        held = firing_pools(stack.alerts())
        expected, shown = len(held), dashboard_count(stack.prometheus)
        if expected == shown:
            return (expected, shown)
        seen[:] = [f"Alertmanager holds {sorted(held)}; the dashboard counts {shown}:", *why_counted(stack)]
        return None

    try:
        poll(  # Prometheus keeps a cleared alert firing for keep_firing_for (30 s) before it resolves
            agree,
            timeout=60,
            what=f"the dashboard's imbalanced pools to match the alerts ({step})",
            logs=stack.logs,
        )
    except AssertionError as failed:
        raise AssertionError("\n".join([*seen, str(failed)])) from None


def why_counted(stack: Deployed) -> list[str]:
    """The series behind the "Imbalanced pools" stat, each part of its query on its own."""
    parts = {
        "gap": "poolwatch_pool_conservation_gap_slots != 0",
        "rule alerts": 'ALERTS{alertname=~"PoolwatchDoubleFree|PoolwatchSlotLeak"}',
        "sidecar alerts": 'poolwatch_alert_active{alertname=~"PoolwatchDoubleFree|PoolwatchSlotLeak"}',
    }
    lines = [
        f"  {name}: {sample['metric']} = {sample['value'][1]}"
        for name, expr in parts.items()
        for sample in stack.prometheus.query(expr)
    ]
    for pod in stack.pods:
        held = httpx.get(f"http://127.0.0.1:{pod.port}/api/v1/alerts", timeout=10).json()
        lines += [f"  {pod.name}'s sidecar holds {a}" for a in held if a.get("name") in CONSERVATION]
    lines += [
        f"  page at {t:.1f}: {a['status']} {a['labels'].get('pod')} tp{a['labels'].get('tp_rank')} "
        f"prometheus={a['labels'].get('prometheus', '')} {a['startsAt']} {a['endsAt']}"
        for t, body in stack.pages()
        for a in body["alerts"]
        if a["labels"]["alertname"] in CONSERVATION
    ]
    return lines


# --- the notifications ----------------------------------------------------------------------


def notified(stack: Deployed, alertname: str, status: str = "firing") -> list[tuple[float, Alert, str]]:
    """(arrival, alert, receiver) of every ``status`` alert named ``alertname`` the receivers got."""
    return [
        (t, a, body["receiver"])
        for t, body in stack.pages()
        for a in body["alerts"]
        if a["labels"]["alertname"] == alertname and a["status"] == status
    ]


def started_at(alert: Alert) -> float:
    """Unix time of an Alertmanager webhook alert's ``startsAt`` (RFC 3339, UTC)."""
    stamp = str(alert["startsAt"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def identity(alert: Alert) -> tuple[tuple[str, str], ...]:
    """An alert's labels less the path label (the sidecar's and the rule's copy of one alert) and
    the sidecar's cause digest (its copies before and after an update)."""
    return tuple(sorted((k, v) for k, v in alert["labels"].items() if k not in (PATH_LABEL, DETAIL_LABEL)))


@dataclass
class Story:
    """What happened when (wall clock), as the test observed it."""

    fault_at: float
    crashes: LogWatcher
    logs: list[Path]
    page_at: float = 0.0
    stale_at: float = 0.0
    restarted_at: float = 0.0
    resolved_at: float = 0.0
    incidents: set[tuple[tuple[str, str], ...]] = field(default_factory=set)


def check_the_pages_before_the_crash(stack: Deployed, story: Story) -> None:
    """One page per double-free incident, on the pager, naming the pod and rank, merged from both
    paths, before that pod's crash."""
    what = "the double-free page"
    poll(lambda: notified(stack, "PoolwatchDoubleFree") or None, timeout=120, what=what, logs=story.logs)
    story.page_at = min(t for t, _, _ in notified(stack, "PoolwatchDoubleFree"))
    dashboard_agrees(stack, "paged")
    poll(lambda: story.crashes.seen or None, timeout=180, what="SGLang's idle-check crash", logs=story.logs)
    pages = notified(stack, "PoolwatchDoubleFree")
    for _, alert, receiver in pages:
        labels = alert["labels"]
        assert receiver == "poolwatch-page"
        assert labels["worker"] == labels["pod"], labels
        assert PODS[labels["pod"]] == labels["role"] == "prefill", labels
        assert labels["namespace"] == stack.pods[0].namespace
        assert (labels["pool"], labels["dp_rank"], labels["pp_rank"]) == ("mamba", "0", "0")
        assert (labels["severity"], labels["tp_rank"] in ("0", "1")) == ("critical", True)
        assert not {"job", "instance", "container", "endpoint"} & set(labels), f"a scrape label: {labels}"
        assert labels[PATH_LABEL] == DIRECT, f"the rule copy paged, not the sidecar's exact one: {labels}"
    story.incidents = {identity(a) for _, a, _ in pages}
    # an incident pages once: every notification listing it belongs to one Alertmanager group (one
    # PagerDuty incident: its dedup_key is the group key); a TP peer joining the group re-lists it
    assert_paged_once(stack, "PoolwatchDoubleFree")
    check_paged_before_crashing(stack, story)
    check_what_the_chat_said(stack, story)


def check_what_the_chat_said(stack: Deployed, story: Story) -> None:
    """The Slack message and the PagerDuty event of each page carry the place, the cause, the crash
    warning and the links, rendered by Alertmanager from the shipped templates."""
    paged = {dict(i)["pod"] for i in story.incidents}
    slack = [
        body["attachments"][0] for _, receiver, body in stack.chat("slack") if receiver == "poolwatch-page"
    ]
    events = [body for _, receiver, body in stack.chat("pagerduty") if receiver == "poolwatch-page"]
    for pod in paged:
        texts = [a["text"] for a in slack if f"pod {pod}," in a["text"]]
        assert texts, f"no Slack page names {pod}: {slack}"
        text = texts[0]
        for part in (
            "PoolwatchDoubleFree",
            "pool mamba",
            "rank dp 0",
            "Cause:",
            "a double free",
            "*Runbook:* http",
        ):
            assert part in text, (part, text)
        assert "WILL CRASH AT ITS NEXT IDLE MOMENT" in text, text  # 0.5.4's idle check is strict
        summaries = [e["payload"]["summary"] for e in events if f"/{pod} " in e["payload"]["summary"]]
        assert summaries, f"no PagerDuty event names {pod}: {events}"
        assert summaries[0].startswith("WILL CRASH AT NEXT IDLE: PoolwatchDoubleFree"), summaries[0]


def assert_paged_once(stack: Deployed, alertname: str) -> None:
    """Each incident of ``alertname`` paged once: every notification listing it belongs to one
    Alertmanager group (one PagerDuty incident: its dedup_key is the group key); a TP peer joining
    the group later re-lists it in the group's next notification, which is not a second page."""
    groups: dict[tuple[tuple[str, str], ...], set[str]] = {}
    for _, body in stack.pages():
        for a in body["alerts"]:
            if a["labels"]["alertname"] == alertname and a["status"] == "firing":
                groups.setdefault(identity(a), set()).add(body["groupKey"])
    assert all(len(keys) == 1 for keys in groups.values()), f"an incident paged twice: {groups}"


def check_paged_before_crashing(stack: Deployed, story: Story) -> None:
    for pod, crashed_at in story.crashes.seen.items():
        paged = [t for t, a, _ in notified(stack, "PoolwatchDoubleFree") if a["labels"]["pod"] == pod]
        assert paged, f"{pod} crashed without a page"
        assert min(paged) < crashed_at, f"{pod} paged {min(paged) - crashed_at:+.1f} s after its crash"


def check_both_paths_hold_the_same_alerts(stack: Deployed, story: Story) -> None:
    """Prometheus' own alerts have exactly the labels of the pages; Alertmanager holds each once."""
    query = 'ALERTS{alertname="PoolwatchDoubleFree", alertstate="firing"}'

    def rule_alerts() -> set[tuple[tuple[str, str], ...]] | None:
        found = {
            tuple(
                sorted(
                    (k, v) for k, v in r["metric"].items() if k not in ("__name__", "alertstate", PATH_LABEL)
                )
            )
            for r in stack.prometheus.query(query)
        }
        return found if found >= story.incidents else None

    assert (
        poll(rule_alerts, timeout=60, what="Prometheus' double-free alerts", logs=story.logs)
        == story.incidents
    )
    held = [a for a in stack.alerts() if a["labels"]["alertname"] == "PoolwatchDoubleFree"]
    direct = [a for a in held if a["labels"][PATH_LABEL] == DIRECT]
    assert sorted(identity(a) for a in direct) == sorted(story.incidents)
    assert all(a["status"]["state"] == "active" for a in direct), direct
    # the rule copies are there too, each silenced by the sidecar's copy of the same alert
    for a in held:
        if a["labels"][PATH_LABEL] == RULES:
            assert a["status"]["state"] == "suppressed", a
            assert a["status"]["inhibitedBy"], a


def check_the_crash_inhibits_the_stale_alerts(stack: Deployed, story: Story) -> None:
    """The crash pages once per rank; every rank of a crashed pod goes stale, inhibited, unpaged;
    the dead pod's double free stays firing."""
    poll(
        lambda: notified(stack, "PoolwatchSchedulerCrashed") or None,
        timeout=60,
        what="the crash page",
        logs=story.logs,
    )

    def stale_of_crashed() -> list[Alert] | None:
        crashed = set(story.crashes.seen)
        stale = [
            a for a in stack.alerts() if a["labels"]["alertname"] == STALE and a["labels"]["pod"] in crashed
        ]
        ranks = {(a["labels"]["pod"], a["labels"]["tp_rank"]) for a in stale}
        return stale if ranks == {(p, tp) for p in crashed for tp in ("0", "1")} else None

    stale = poll(stale_of_crashed, timeout=150, what="the crashed pods' stale alerts", logs=story.logs)
    story.stale_at = time.time()
    for alert in stale:
        assert (alert["status"]["state"], bool(alert["status"]["inhibitedBy"])) == ("suppressed", True), alert
    for name in INHIBITED:
        assert not [a for _, a, _ in notified(stack, name) if a["labels"]["pod"] in story.crashes.seen], name
    crash_pages = notified(stack, "PoolwatchSchedulerCrashed")
    assert {a["labels"]["pod"] for _, a, _ in crash_pages} == set(story.crashes.seen)
    assert_paged_once(stack, "PoolwatchSchedulerCrashed")
    check_paged_before_crashing(stack, story)
    assert {a["labels"]["pod"] for _, a, _ in notified(stack, "PoolwatchDoubleFree")} == set(
        story.crashes.seen
    )
    still = [
        a
        for a in stack.alerts()
        if a["labels"]["alertname"] == "PoolwatchDoubleFree" and a["labels"][PATH_LABEL] == DIRECT
    ]
    assert sorted(identity(a) for a in still) == sorted(story.incidents), "a dead pod's double free resolved"
    dashboard_agrees(stack, "crashed")


def check_the_restart_resolves_everything(stack: Deployed, story: Story) -> None:
    """A new emulator process (the pods restarted, no fault): every alert resolves, each page gets
    its resolution, and nothing pages again."""
    assert stack.emulator is not None
    stack.emulator.stop()
    story.restarted_at = stack.start_emulator("restart", fault=False)
    poll(
        lambda: None if stack.alerts() else True, timeout=150, what="every alert to resolve", logs=story.logs
    )
    story.resolved_at = time.time()

    def unresolved() -> list[str] | None:  # resolutions go out at the group's next flush (group_interval)
        late = []
        for name in ("PoolwatchDoubleFree", "PoolwatchSchedulerCrashed", "PoolwatchIdleCheckFailed"):
            paged = {identity(a) for _, a, _ in notified(stack, name)}
            resolved = {identity(a) for _, a, _ in notified(stack, name, "resolved")}
            late += [name] if resolved != paged else []
        return None if late else []

    poll(unresolved, timeout=30, what="every page's resolution", logs=story.logs)
    # a group notification after the restart still lists its not-yet-resolved alerts as firing (with
    # their first startsAt): only an alert that became active after the restart is a new page
    again = [
        a
        for n in (*CONSERVATION, "PoolwatchSchedulerCrashed")
        for t, a, _ in notified(stack, n)
        if t > story.restarted_at and started_at(a) > story.restarted_at
    ]
    assert again == [], "paged again after the restart"
    dashboard_agrees(stack, "restarted")


def test_as_deployed_the_seed_fault_pages_once_before_the_crash_the_crash_inhibits_and_the_restart_resolves(
    stack: Deployed,
) -> None:
    sglang_logs = {p.name: stack.directory / "sglang-logs" / f"{p.name}.log" for p in stack.pods}
    crashes = LogWatcher(sglang_logs, CRASH)
    stack.cleanup.callback(crashes.stop)
    started = stack.start_emulator("first", fault=True)
    story = Story(started + FAULT_AT / TIME_SCALE, crashes, [*stack.logs, *sglang_logs.values()])

    check_the_pages_before_the_crash(stack, story)
    check_both_paths_hold_the_same_alerts(stack, story)
    check_the_crash_inhibits_the_stale_alerts(stack, story)
    crashed = ", ".join(f"{pod} {at - story.fault_at:.1f}" for pod, at in sorted(crashes.seen.items()))
    print(
        f"\nwall seconds after the fault (time scale {TIME_SCALE:g}; the fault is {FAULT_AT:g} simulated s "
        f"after the start, so a late emulator makes these figures upper bounds): "
        f"page {story.page_at - story.fault_at:.1f}; crash {crashed}; "
        f"stale alerts inhibited {story.stale_at - story.fault_at:.1f}"
    )
    check_the_restart_resolves_everything(stack, story)
    print(f"restart to every alert resolved: {story.resolved_at - story.restarted_at:.1f} s")

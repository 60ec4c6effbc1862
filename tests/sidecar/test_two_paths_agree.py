"""Both alert paths agree over an incident's whole life: fault, crash, restart, recovery.

The sidecar (store, exporter, detector, on a fake clock) watches one rank of pod ``decode-0``
through its three sources: the probe (exact), SGLang's ``/metrics`` (coarse) and its log.  Every
5 s the sidecar evaluates its own alerts (the direct path) and its ``/metrics`` page is "scraped":
the series, with the target labels a PodMonitor adds, become the input of ``promtool test
rules`` over the generated Prometheus rules (the other path).  At each checkpoint Prometheus's
``ALERTS`` must equal the sidecar's firing alerts -- same names, same labels -- so Alertmanager
merges them; in particular a dead worker's double free keeps firing on both paths until the
restart, and both resolve together after it; the restart ends the logged crash on both at once.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.detect.streams import RankStream, coarse, exact
from tests.helpers import require_tool

from poolwatch.artifacts.rules import rule_groups
from poolwatch.detect.alert import AlertState
from poolwatch.model.rank import IncidentKind, Pool, Role, WorkerId
from poolwatch.model.snapshot import Incident
from poolwatch.notify.paths import DIRECT, PATH_LABEL, RULES
from poolwatch.settings.groups import IdentitySettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.app import build_registry
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

STEP = 5  # seconds: the scrape interval of Prometheus, the sidecar's evaluation, promtool's
FAULT, CRASH, RESTART, END = 60, 120, 330, 1100
POD = {"namespace": "llm", "pod": "decode-0-7f9c"}
SCRAPE = {"job": "poolwatch", "instance": "10.0.0.7:9464", "container": "poolwatch", "endpoint": "metrics"}
COMPARED = (
    "PoolwatchDoubleFree|PoolwatchSlotLeak|PoolwatchSchedulerCrashed|PoolwatchIdleCheckFailed|"
    "PoolwatchSnapshotStale"
)
WORKER = WorkerId(
    "decode-0", Role.DECODE, dp_rank=0, tp_rank=1, pp_rank=0, model="qwen3-next", engine="sglang"
)
CHECKPOINTS = {  # time -> what both paths must be firing then
    30: set(),
    90: {"PoolwatchDoubleFree"},
    185: {"PoolwatchDoubleFree", "PoolwatchSchedulerCrashed"},
    195: {"PoolwatchDoubleFree", "PoolwatchSchedulerCrashed", "PoolwatchSnapshotStale"},  # 75 s after death
    250: {"PoolwatchDoubleFree", "PoolwatchSchedulerCrashed", "PoolwatchSnapshotStale"},
    345: {"PoolwatchDoubleFree", "PoolwatchSnapshotStale"},  # the holds; the restart ended the crash
    365: set(),  # restarted clean, holds over
    400: set(),
    1080: set(),
}

Series = dict[str, list[float | None]]


class Pod:
    """The rank's three sources over time, as snapshots the scrape loop would store."""

    def __init__(self, clock: FakeClock, store: SnapshotStore) -> None:
        self.clock, self.store = clock, store
        self.probe = RankStream(clock, worker=WORKER, step=0.0)
        self.metrics = RankStream(clock, worker=WORKER, boot_id="", step=0.0)

    def scrape(self, t: int) -> None:
        if CRASH <= t < RESTART:
            if t == CRASH:  # the log's last words; probe and /metrics no longer answer
                crash = Incident(
                    IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", self.clock.now
                )
                self.store.put(replace(self.probe.next(), source="sglang-log", pools={}, incidents=(crash,)))
            return
        if t == RESTART:
            self.probe.restart()
        gap = -1 if FAULT <= t < CRASH else 0
        self.store.put(self.probe.next(exact(Pool.FULL, 0), exact(Pool.MAMBA, gap)))
        self.store.put(replace(self.metrics.next(coarse(Pool.FULL, 300)), source="sglang-metrics"))


def exported(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample of a /metrics page, with the PodMonitor's labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {**s.labels, **POD, **SCRAPE}
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            out[f"{s.name}{{{inner}}}"] = s.value
    return out


def run_sidecar() -> tuple[Series, dict[int, set[tuple[tuple[str, str], ...]]], dict[int, dict[str, float]]]:
    clock = FakeClock(1_767_225_600.0)
    settings = Settings(identity=IdentitySettings(worker="decode-0", **POD))
    store = SnapshotStore(clock=clock)
    alerting = build_alerting(settings, store, clock)
    registry = build_registry(store, clock, settings.detection.stale_after)
    pod = Pod(clock, store)
    series: Series = defaultdict(lambda: [None] * (END // STEP + 1))
    firing, pages = {}, {}
    for i, t in enumerate(range(0, END + 1, STEP)):
        clock.now = 1_767_225_600.0 + t
        pod.scrape(t)
        alerts = alerting.evaluate(clock.now)
        page = exported(generate_latest(registry).decode())
        for name, value in page.items():
            series[name][i] = value
        pages[t] = page
        chosen = [a for a in alerts if a.state is AlertState.FIRING and a.name in COMPARED.split("|")]
        firing[t] = {tuple(sorted(a.all_labels.items())) for a in chosen}
    return series, firing, pages


def scraped(values: list[float | None]) -> list[str]:
    """promtool's notation for what Prometheus stored: a series gone from a scrape is marked
    ``stale`` (it vanishes at once, as in a real scrape), and absent after that (``_``)."""
    out = []
    for i, v in enumerate(values):
        if v is not None:
            out.append(f"{v:.17g}")  # every digit: timestamps are compared
        else:
            out.append("stale" if i and values[i - 1] is not None else "_")
    return out


def promtool_test(series: Series, firing: dict[int, set[tuple[tuple[str, str], ...]]], where: Path) -> str:
    (where / "rules.yml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    inputs = [
        {"series": name, "values": " ".join(scraped(values))} for name, values in sorted(series.items())
    ]
    checks = [
        {
            "expr": f'ALERTS{{alertstate="firing",alertname=~"{COMPARED}"}}',
            "eval_time": f"{t}s",
            "exp_samples": [
                {
                    "labels": "ALERTS{"
                    + ",".join(f'{k}="{v}"' for k, v in (*as_rule_copy(labels), ("alertstate", "firing")))
                    + "}",
                    "value": 1,
                }
                for labels in sorted(firing[t])
            ],
        }
        for t in CHECKPOINTS
    ]
    test = {"interval": f"{STEP}s", "input_series": inputs, "promql_expr_test": checks}
    doc = {"rule_files": ["rules.yml"], "evaluation_interval": f"{STEP}s", "tests": [test]}
    (where / "lifecycle.yml").write_text(yaml.safe_dump(doc, width=10_000))
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", "lifecycle.yml"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def as_rule_copy(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The sidecar's labels as the rule copy carries them: the same but for the path label, which
    tells the copies apart (the shipped inhibit rule silences the rule copy)."""
    assert (PATH_LABEL, DIRECT) in labels
    return tuple(sorted({**dict(labels), PATH_LABEL: RULES}.items()))


def test_the_sidecar_fires_what_the_story_says_at_every_checkpoint() -> None:
    _, firing, _ = run_sidecar()
    for t, names in CHECKPOINTS.items():
        assert {dict(labels)["alertname"] for labels in firing[t]} == names, t
    for labels in firing[250]:
        assert {k: v for k, v in labels if k in POD} == POD  # two pods of one role stay two alerts


def test_a_dead_workers_double_free_never_looks_healthy_on_a_dashboard() -> None:
    _, _, pages = run_sidecar()
    gap = "poolwatch_pool_conservation_gap_slots{"
    for t in range(CRASH, RESTART, STEP):
        mamba = [v for k, v in pages[t].items() if k.startswith(gap) and 'pool="mamba"' in k]
        assert mamba == [-1.0], t
    assert [v for k, v in pages[250].items() if k.startswith("poolwatch_snapshot_stale{")] == [1.0]


def test_prometheus_fires_exactly_what_the_sidecar_fires_from_fault_to_recovery(tmp_path: Path) -> None:
    series, firing, _ = run_sidecar()
    assert promtool_test(series, firing, tmp_path) == ""

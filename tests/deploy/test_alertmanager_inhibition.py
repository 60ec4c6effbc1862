"""The route example's inhibit rules in a real Alertmanager: a crashed scheduler inhibits its own
worker's stale-snapshot, target-down and probe alerts, from either alert path, and nothing else.

The alerts are posted the way each path labels them: the sidecar's copy through poolwatch's own
Alertmanager client, the Prometheus rule's copy with the labels the generated rules keep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from poolwatch.detect.alert import Alert, AlertState, rank_labels
from poolwatch.detect.schema import Severity
from poolwatch.model.rank import Role, WorkerId
from poolwatch.notify.alertmanager import postable_alerts
from rigs.fakes.clock import FakeClock
from rigs.stack.deployed import alertmanager_config
from rigs.stack.processes import poll
from rigs.stack.prometheus import run_alertmanager
from rigs.stack.receivers import WebhookRecorder

NS = "qwen3-next-pd"


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    with contextlib.ExitStack() as cleanup:
        hooks = WebhookRecorder()
        cleanup.callback(hooks.stop)
        url, _ = run_alertmanager(cleanup, tmp_path, alertmanager_config(hooks.url))
        yield url


def direct(name: str, severity: Severity, pod: str, tp: int = 0, **target: str) -> dict[str, Any]:
    """The sidecar's copy of an alert, as its Alertmanager client posts it (a rank's labels, or a
    target's with its worker), with the namespace and pod the sidecar adds."""
    own = (
        {"worker": pod, **target}
        if target
        else dict(rank_labels(WorkerId(pod, Role.PREFILL, 0, tp, 0, engine="sglang")))
    )
    labels = tuple(sorted({**own, "namespace": NS, "pod": pod}.items()))
    now = FakeClock().now
    alert = Alert(name, pod, severity, AlertState.FIRING, labels, {"summary": name}, 1.0, now, fired_at=now)
    (body,) = postable_alerts([alert], now, 60.0)
    body["startsAt"] = body["endsAt"] = None  # Alertmanager's clock decides
    return {k: v for k, v in body.items() if v is not None}


def from_rules(name: str, severity: str, pod: str, tp: int = 0, ns: str = NS) -> dict[str, Any]:
    """The Prometheus rule's copy: the series' labels less the scrape's (job, instance, ...)."""
    labels = {"alertname": name, "severity": severity, "namespace": ns, "pod": pod, "worker": pod}
    labels |= {"role": "prefill", "dp_rank": "0", "tp_rank": str(tp), "pp_rank": "0"}
    return {"labels": labels, "annotations": {"summary": name}}


def statuses(url: str) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    body = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
    return {
        (
            a["labels"]["alertname"],
            a["labels"]["namespace"],
            a["labels"]["pod"],
            a["labels"].get("tp_rank", ""),
        ): a["status"]
        for a in body
    }


def test_a_crashed_scheduler_inhibits_its_own_workers_stale_target_and_probe_alerts_only(
    alertmanager: str,
) -> None:
    crash = direct("PoolwatchSchedulerCrashed", Severity.CRITICAL, "prefill-0", tp=1)
    explained = [
        direct("PoolwatchSnapshotStale", Severity.WARNING, "prefill-0", tp=0),
        from_rules("PoolwatchSnapshotStale", "warning", "prefill-0", tp=1),
        direct(
            "PoolwatchTargetDown",
            Severity.WARNING,
            "prefill-0",
            source="probe",
            target="probe:prefill-0/dp0-tp0-pp0",
        ),
        from_rules("PoolwatchProbeDegraded", "warning", "prefill-0", tp=1),
    ]
    unrelated = [
        direct("PoolwatchDoubleFree", Severity.CRITICAL, "prefill-0", tp=0),
        from_rules("PoolwatchSnapshotStale", "warning", "prefill-1"),
        from_rules("PoolwatchSnapshotStale", "warning", "prefill-0", ns="other-namespace"),
    ]
    unrelated[0]["labels"]["pool"] = "mamba"
    response = httpx.post(f"{alertmanager}/api/v2/alerts", json=[crash, *explained, *unrelated], timeout=10)
    assert response.is_success, response.text

    def settled() -> dict[tuple[str, str, str, str], dict[str, Any]] | None:
        found = statuses(alertmanager)
        suppressed = [s for s in found.values() if s["state"] == "suppressed"]
        return found if len(found) == 8 and len(suppressed) == len(explained) else None

    found = poll(settled, timeout=30, what="Alertmanager to inhibit the crash's alerts")
    crash_key = ("PoolwatchSchedulerCrashed", NS, "prefill-0", "1")
    assert found[crash_key]["state"] == "active"
    for alert in explained:
        labels = alert["labels"]
        status = found[(labels["alertname"], NS, "prefill-0", labels.get("tp_rank", ""))]
        assert (status["state"], len(status["inhibitedBy"])) == ("suppressed", 1), labels
    for alert in unrelated:
        labels = alert["labels"]
        status = found[(labels["alertname"], labels["namespace"], labels["pod"], labels.get("tp_rank", ""))]
        assert (status["state"], status["inhibitedBy"]) == ("active", []), labels


def test_a_sidecar_read_under_another_pods_name_silences_that_pods_rule_copies_only(
    alertmanager: str,
) -> None:
    """The cold-CI page (issue 34): decode-0's address answered with prefill-1's sidecar, so the
    rule copy of prefill-1's double free came labelled pod=decode-0.  With the crossing seen
    (PoolwatchSidecarIdentityCrossed), that copy is silenced; the true ones still page."""
    crossed = {
        "labels": {
            "alertname": "PoolwatchSidecarIdentityCrossed",
            "severity": "warning",
            "namespace": NS,
            "pod": "decode-0",
            "sidecar_pod": "prefill-1",
            "poolwatch_path": "rules",
        },
        "annotations": {"summary": "crossed"},
    }
    misread = from_rules("PoolwatchDoubleFree", "critical", "decode-0")
    misread["labels"] |= {"worker": "prefill-1", "pool": "mamba", "poolwatch_path": "rules"}
    true_rule = from_rules("PoolwatchDoubleFree", "critical", "prefill-1")
    true_rule["labels"] |= {"pool": "mamba", "poolwatch_path": "rules", "tp_rank": "1"}
    own = direct("PoolwatchDoubleFree", Severity.CRITICAL, "prefill-1", tp=0)
    own["labels"]["pool"] = "mamba"
    response = httpx.post(
        f"{alertmanager}/api/v2/alerts", json=[crossed, misread, true_rule, own], timeout=10
    )
    assert response.is_success, response.text

    def settled() -> dict[tuple[str, str, str, str], dict[str, Any]] | None:
        found = statuses(alertmanager)
        return found if len(found) == 4 and any(s["state"] == "suppressed" for s in found.values()) else None

    found = poll(settled, timeout=30, what="Alertmanager to silence the misread pod's rule copy")
    assert found[("PoolwatchDoubleFree", NS, "decode-0", "0")]["state"] == "suppressed"
    assert found[("PoolwatchDoubleFree", NS, "prefill-1", "1")]["state"] == "active"
    assert found[("PoolwatchDoubleFree", NS, "prefill-1", "0")]["state"] == "active"
    assert found[("PoolwatchSidecarIdentityCrossed", NS, "decode-0", "")]["state"] == "active"

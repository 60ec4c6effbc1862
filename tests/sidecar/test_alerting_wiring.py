"""build_alerting as the sidecar uses it: store subscription, collector, API, notifier tasks, restarts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from tests.detect.sidecar import FakeAlertmanager, Ticker, seeded, seen_seed, settings, settle

from poolwatch.errors import ConfigError, Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import AlertSettings, IdentitySettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock


async def test_the_seed_snapshot_is_paged_to_alertmanager_through_the_wiring(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    am = FakeAlertmanager()
    alerting = seen_seed(
        settings(tmp_path), clock, seed_snapshot, transport=httpx.MockTransport(am), sleep=Ticker(clock)
    )
    await alerting.start()
    await settle()
    await alerting.stop()
    posted = {a["labels"]["alertname"]: a for post in am.posts for a in post}
    assert posted["PoolwatchDoubleFree"]["labels"]["pool"] == "mamba"
    assert posted["PoolwatchDoubleFree"]["labels"]["worker"] == "qwen3-next-prefill-0"
    assert "https://github.com/poolwatch" in posted["PoolwatchDoubleFree"]["annotations"]["runbook_url"]
    [stats] = alerting.delivery_stats()
    assert stats.receiver == "alertmanager:am.example:9093"
    assert stats.counts["sent"] >= 1


def test_the_collector_exports_alerts_trends_and_delivery_from_the_catalogue(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    alerting = seen_seed(settings(tmp_path), clock, seed_snapshot)
    alerting.evaluate()
    registry = CollectorRegistry()
    registry.register(alerting.collector)
    labels = {
        "alertname": "PoolwatchDoubleFree",
        "severity": "critical",
        "worker": "qwen3-next-prefill-0",
        "role": "prefill",
        "dp_rank": "0",
        "tp_rank": "0",
        "pp_rank": "0",
        "pool": "mamba",
        "state": "firing",
    }
    assert registry.get_sample_value("poolwatch_alert_active", labels) == 1.0
    names = {m.name for m in alerting.collector.describe()}
    assert names == {
        "poolwatch_alert_active",
        "poolwatch_pool_leak_rate_slots_per_second",
        "poolwatch_pool_exhaustion_eta_seconds",
        "poolwatch_notifications",
        "poolwatch_notification_queue_length",
    }


def test_a_target_alert_names_its_target_in_the_worker_label(tmp_path: Path, clock: FakeClock) -> None:
    store = SnapshotStore()
    alerting = build_alerting(settings(tmp_path, target_down_for=1.0), store, clock)
    store.record_failure("probe:decode-0", "probe", 1.0, Reason.CONNECT, "refused")
    alerting.evaluate()
    clock.advance(2)
    alerting.evaluate()
    registry = CollectorRegistry()
    registry.register(alerting.collector)
    value = registry.get_sample_value(
        "poolwatch_alert_active",
        {
            "alertname": "PoolwatchTargetDown",
            "severity": "warning",
            "worker": "probe:decode-0",
            "role": "",
            "dp_rank": "",
            "tp_rank": "",
            "pp_rank": "",
            "pool": "",
            "state": "firing",
        },
    )
    assert value == 1.0


async def test_the_alerts_api_lists_firing_alerts_first_and_filters_by_state(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    alerting = seen_seed(settings(tmp_path), clock, seed_snapshot)
    app = FastAPI()
    app.include_router(alerting.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as client:
        every = (await client.get("/api/v1/alerts")).json()
        firing = (await client.get("/api/v1/alerts", params={"state": "firing"})).json()
        bad = await client.get("/api/v1/alerts", params={"state": "burning"})
    assert [a["name"] for a in every] == ["PoolwatchDoubleFree"]
    assert firing[0]["labels"]["alertname"] == "PoolwatchDoubleFree"
    assert firing[0]["annotations"]["summary"].startswith("A memory-pool slot was freed twice")
    assert bad.status_code == 400


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (AlertSettings(alertmanager_urls=("am.example:9093",)), "is not an http"),
        (AlertSettings(bearer_token_file="/nonexistent"), "POOLWATCH_BEARER_TOKEN_FILE"),
    ],
)
def test_bad_alerting_settings_fail_at_build_time_with_one_line(group: AlertSettings, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_alerting(Settings(alerting=group), SnapshotStore(), FakeClock())


def test_the_namespace_and_pod_label_every_alert_and_the_namespace_its_dashboard_link(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    group = settings(tmp_path, dashboard_url="https://grafana.example/")
    where = IdentitySettings(namespace="llm", pod="prefill-0-7f9c")
    store, seed = seeded(clock, seed_snapshot)
    alerting = build_alerting(replace(group, identity=where), store, clock)
    store.put(seed)
    [alert] = alerting.evaluate()
    assert (alert.all_labels["namespace"], alert.all_labels["pod"]) == ("llm", "prefill-0-7f9c")
    assert alert.annotations["dashboard_url"].startswith(
        "https://grafana.example/d/poolwatch-worker/poolwatch-worker?var-namespace=llm&var-worker=qwen3-next-prefill-0"
    )
    restarted = build_alerting(replace(group, identity=where), store, clock)
    assert [a.all_labels for a in restarted.detector.alerts()] == [alert.all_labels]


def test_alerting_without_receivers_still_detects(clock: FakeClock, seed_snapshot: Snapshot) -> None:
    alerting: AlertWiring = seen_seed(Settings(), clock, seed_snapshot)
    assert [a.name for a in alerting.evaluate()] == ["PoolwatchDoubleFree"]
    assert alerting.delivery_stats() == []


def test_two_pods_of_one_role_crashing_together_stay_two_alerts(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    fingerprints = set()
    for pod in ("decode-0", "decode-1"):
        where = IdentitySettings(worker=pod, namespace="llm", pod=pod)
        alerting = seen_seed(replace(settings(tmp_path / pod), identity=where), clock, seed_snapshot)
        fingerprints |= {a.fingerprint for a in alerting.evaluate()}
    assert len(fingerprints) == 2


def test_a_rank_silent_for_forget_after_is_forgotten_and_its_alerts_resolve_with_a_reason(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    store = SnapshotStore(clock=clock)
    group = replace(settings(tmp_path), identity=IdentitySettings(forget_after=600.0))
    alerting = build_alerting(group, store, clock)
    store.put(replace(seed_snapshot, taken_at=clock.now))
    assert [a.state.value for a in alerting.evaluate()] == ["firing"]
    clock.advance(100)
    alerting.evaluate()
    clock.advance(499)
    assert {a.name: a.state.value for a in alerting.evaluate()} == {
        "PoolwatchDoubleFree": "firing",
        "PoolwatchSnapshotStale": "firing",
    }
    clock.advance(2)
    alerts = alerting.evaluate()
    assert {a.state.value for a in alerts} == {"resolved"}
    assert {a.annotations["resolved_reason"] for a in alerts} == {
        "the rank reported nothing for 600 s and was forgotten"
    }
    assert store.latest() == []

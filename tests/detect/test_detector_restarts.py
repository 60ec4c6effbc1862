"""A sidecar restart: firing alerts come back from the state file, are sent again, and resolve
when fresh data disproves them or their rank never reports again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.detect.sidecar import FakeAlertmanager, Ticker, seen_seed, settings, settle
from tests.detect.streams import RankStream

from poolwatch.detect.alert import AlertState
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.persist import load_alerts
from poolwatch.sidecar.state_codec import decode_alerts, encode_alerts
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock


async def test_a_firing_alert_survives_a_sidecar_restart_and_is_sent_again(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    first = seen_seed(settings(tmp_path), clock, seed_snapshot)
    first.evaluate()
    fired = first.detector.alerts()[0]
    await first.stop()
    clock.advance(30)

    am = FakeAlertmanager()
    second = build_alerting(
        settings(tmp_path),
        SnapshotStore(),
        clock,
        transport=httpx.MockTransport(am),
        sleep=Ticker(clock, limit=3),
    )
    [restored] = second.detector.alerts()
    assert (restored.name, restored.state, restored.fired_at) == (
        "PoolwatchDoubleFree",
        AlertState.FIRING,
        fired.fired_at,
    )
    await second.start()
    await settle()
    await second.stop()
    assert am.posts[0][0]["labels"]["alertname"] == "PoolwatchDoubleFree"


def test_a_restored_alert_the_rank_never_confirms_resolves_after_the_grace(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    first = seen_seed(settings(tmp_path), clock, seed_snapshot)
    first.evaluate()
    second = build_alerting(settings(tmp_path), SnapshotStore(), clock)
    clock.advance(299)
    assert [a.state for a in second.evaluate()] == [AlertState.FIRING]
    clock.advance(2)
    assert [a.state for a in second.evaluate()] == [AlertState.RESOLVED]
    assert load_alerts(tmp_path / "alerts.json") == []


def test_a_restored_alert_a_clean_rank_disproves_resolves_with_the_usual_hysteresis(
    tmp_path: Path, clock: FakeClock
) -> None:
    stream = RankStream(clock)
    store = SnapshotStore()
    first = build_alerting(settings(tmp_path), store, clock)
    store.put(stream.next(gap=-1))
    first.evaluate()
    store = SnapshotStore()
    second = build_alerting(settings(tmp_path, resolve_hold=3.0), store, clock)
    seen = []
    for _ in range(4):
        store.put(stream.next())
        seen.append(second.evaluate()[0].state)
    assert seen == [AlertState.FIRING, AlertState.FIRING, AlertState.RESOLVED, AlertState.RESOLVED]


def test_the_state_file_round_trips_and_a_corrupt_one_is_ignored(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot, caplog: pytest.LogCaptureFixture
) -> None:
    alerting = seen_seed(settings(tmp_path), clock, seed_snapshot)
    alerts = alerting.evaluate()
    assert decode_alerts(encode_alerts(alerts)) == alerts
    assert [p.name for p in tmp_path.iterdir()] == ["alerts.json"]  # no temporary file left behind
    (tmp_path / "alerts.json").write_text("{not json")
    assert load_alerts(tmp_path / "alerts.json") == []
    assert "event=state_file_corrupt" in caplog.text
    with pytest.raises(ValueError, match=r"alerts\[0\].subject: expected a string"):
        decode_alerts({"version": 1, "alerts": [{"name": "PoolwatchDoubleFree"}]})
    # an alert this version does not know (a rollback) is skipped alone (issue 24 item 6)
    assert decode_alerts({"version": 1, "alerts": [{"name": "PoolwatchGone"}]}) == []

"""A plain webhook does not deduplicate: it gets one firing message per alert (and one resolved),
never a periodic re-send, nothing again after an outage or a sidecar restart that it acknowledged
(2xx) before; what it never acknowledged is sent after the restart.  Alertmanager, which
deduplicates, still gets its re-sends."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from tests.detect.sidecar import seeded, settings
from tests.notify.fakes import LABELS, FakeAlertmanager, alert, deliverer

from poolwatch.detect.alert import AlertState
from poolwatch.model.snapshot import Snapshot
from poolwatch.notify.paths import DIRECT, PATH_LABEL
from poolwatch.notify.webhook import WebhookReceiver
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.persist import load_state
from poolwatch.sidecar.state_codec import encode_alerts
from rigs.fakes.clock import FakeClock

HOOK = "https://hooks.example/poolwatch"


async def test_a_webhook_gets_one_firing_message_however_long_the_alert_fires(clock: FakeClock) -> None:
    hook = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(hook, clock, alerts, receiver=WebhookReceiver(HOOK))
    assert await d.deliver_once() == 1
    for _ in range(6):  # six minutes of firing: Alertmanager would have had six re-sends
        clock.advance(60)
        assert await d.deliver_once() == 0
    alerts[0] = alert(clock, AlertState.RESOLVED)
    assert await d.deliver_once() == 1
    assert [b["status"] for b in hook.bodies] == ["firing", "resolved"]


async def test_a_webhook_outage_delays_the_message_but_never_repeats_one_already_sent(
    clock: FakeClock,
) -> None:
    hook = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(hook, clock, alerts, receiver=WebhookReceiver(HOOK))
    assert await d.deliver_once() == 1
    second = alert(clock, subject="prefill-0/dp0-tp2-pp0", labels=(("tp_rank", "2"), ("worker", "prefill-0")))
    alerts.append(second)
    hook.status = 503
    assert await d.deliver_once() == 0  # the new one fails
    hook.status, attempted = 200, len(hook.bodies)
    clock.advance(120)
    assert await d.deliver_once() == 1  # only the one never delivered
    after = [a["fingerprint"] for body in hook.bodies[attempted:] for a in body["alerts"]]
    assert after == [second.fingerprint]


async def restarted(tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot, told: list[str]) -> Fakes:
    """A sidecar restarted with one firing alert in its state file, which says ``told`` (receiver
    names) acknowledged it; returns what the webhook and Alertmanager then got."""
    am, hook = FakeAlertmanager(), FakeAlertmanager()

    def route(request: httpx.Request) -> httpx.Response:
        return (hook if request.url.host == "hooks.example" else am)(request)

    before = alert(clock, labels=tuple(sorted((*LABELS, (PATH_LABEL, DIRECT)))))  # as the sidecar saves it
    (tmp_path / "alerts.json").write_text(
        json.dumps(encode_alerts([before], {before.fingerprint: frozenset(told)}))
    )
    store, _ = seeded(clock, seed_snapshot)
    config = settings(tmp_path, webhook_urls=(HOOK,))
    alerting = build_alerting(config, store, clock, transport=httpx.MockTransport(route))
    await alerting.start()
    try:
        for d in alerting._deliverers:
            await d.deliver_once()
    finally:
        await alerting.stop()
    return Fakes(am, hook)


@dataclass
class Fakes:
    am: FakeAlertmanager
    hook: FakeAlertmanager


async def test_after_a_restart_a_webhook_is_not_told_again_what_it_got_but_alertmanager_is(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    got = await restarted(tmp_path, clock, seed_snapshot, told=[WebhookReceiver(HOOK).name])
    assert got.hook.bodies == []
    assert [a["labels"]["alertname"] for b in got.am.bodies for a in b] == ["PoolwatchDoubleFree"]


async def test_after_a_restart_a_webhook_is_told_a_firing_alert_it_never_got(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    got = await restarted(tmp_path, clock, seed_snapshot, told=[])
    assert [a["labels"]["alertname"] for b in got.hook.bodies for a in b["alerts"]] == ["PoolwatchDoubleFree"]


async def test_the_state_file_says_which_webhook_acknowledged_an_alert_and_only_after_a_2xx(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    hook = FakeAlertmanager()
    hook.status = 503
    store, _ = seeded(clock, seed_snapshot)
    config = settings(tmp_path, webhook_urls=(HOOK,), alertmanager_urls=())
    alerting = build_alerting(config, store, clock, transport=httpx.MockTransport(hook))
    await alerting.start()
    try:
        (d,) = alerting._deliverers
        store.put(replace(seed_snapshot, taken_at=clock.now))
        alerting.evaluate()
        await d.deliver_once()
        alerting.evaluate()
        saved = load_state(tmp_path / "alerts.json")
        assert saved.alerts
        assert saved.told == {}  # the webhook answered 503: not delivered
        hook.status = 200
        clock.advance(120)
        await d.deliver_once()
        alerting.evaluate()
        saved = load_state(tmp_path / "alerts.json")
        assert saved.told == {a.fingerprint: frozenset({d.receiver.name}) for a in saved.alerts}
    finally:
        await alerting.stop()

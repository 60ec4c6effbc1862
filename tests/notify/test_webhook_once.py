"""A plain webhook does not deduplicate: it gets one firing message per alert (and one resolved),
never a periodic re-send, nothing again after an outage or a sidecar restart.  Alertmanager, which
deduplicates, still gets its re-sends."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from tests.detect.sidecar import seeded, settings
from tests.helpers import FakeClock
from tests.notify.fakes import FakeAlertmanager, alert, deliverer

from poolwatch.detect.alert import AlertState
from poolwatch.model import Snapshot
from poolwatch.notify.webhook import WebhookReceiver
from poolwatch.sidecar.alerting import build_alerting
from poolwatch.sidecar.persist import encode_alerts

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


async def test_after_a_restart_a_webhook_is_not_told_again_but_alertmanager_is(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    am, hook = FakeAlertmanager(), FakeAlertmanager()

    def route(request: httpx.Request) -> httpx.Response:
        return (hook if request.url.host == "hooks.example" else am)(request)

    before = alert(clock)
    (tmp_path / "alerts.json").write_text(json.dumps(encode_alerts([before])))
    store, _ = seeded(clock, seed_snapshot)
    config = settings(tmp_path, webhook_urls=(HOOK,))
    alerting = build_alerting(config, store, clock, transport=httpx.MockTransport(route))
    await alerting.start()
    try:
        for d in alerting._deliverers:
            await d.deliver_once()
    finally:
        await alerting.stop()
    assert hook.bodies == []
    assert [a["labels"]["alertname"] for b in am.bodies for a in b] == ["PoolwatchDoubleFree"]

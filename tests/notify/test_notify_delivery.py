"""Delivery to Alertmanager and webhooks over httpx.MockTransport: re-send, outage, retries, bounds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
from tests.helpers import SEED_DOUBLE_FREE_LABELS
from tests.notify.fakes import LABELS, FakeAlertmanager, alert, deliverer

from poolwatch.detect.alert import AlertState
from poolwatch.detect.schema import Severity
from poolwatch.notify.alertmanager import AlertmanagerReceiver, detail, iso
from poolwatch.notify.delivery import Deliverer
from poolwatch.notify.paths import DETAIL_LABEL
from poolwatch.notify.webhook import WebhookReceiver
from rigs.fakes.clock import FakeClock


async def test_a_firing_alert_is_posted_at_once_and_re_sent_while_it_fires(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(am, clock, alerts)
    assert await d.deliver_once() == 1
    clock.advance(30)
    assert await d.deliver_once() == 0
    clock.advance(30)
    assert await d.deliver_once() == 1
    assert len(am.bodies) == 2
    [posted] = am.bodies[0]
    assert posted == {
        "labels": {**SEED_DOUBLE_FREE_LABELS, DETAIL_LABEL: detail(alerts[0])},
        "annotations": {"summary": "s", "description": "d"},
        "startsAt": iso(clock.now - 60),
        "endsAt": iso(clock.now - 60 + 240),
    }
    assert d.stats().counts == {"sent": 2, "failed": 0, "dropped": 0}


async def test_a_resolved_alert_is_posted_once_with_its_end_time(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(am, clock, alerts)
    await d.deliver_once()
    clock.advance(10)
    alerts[0] = replace(alerts[0], state=AlertState.RESOLVED, resolved_at=clock.now)
    assert await d.deliver_once() == 1
    assert am.bodies[-1][0]["endsAt"] == iso(clock.now)
    clock.advance(120)
    assert await d.deliver_once() == 0


async def test_a_pending_alert_is_nobody_s_business_and_one_never_sent_is_never_resolved(
    clock: FakeClock,
) -> None:
    am = FakeAlertmanager()
    alerts = [alert(clock, AlertState.PENDING)]
    d = deliverer(am, clock, alerts)
    assert await d.deliver_once() == 0
    alerts[0] = replace(alerts[0], state=AlertState.RESOLVED)
    assert await d.deliver_once() == 0
    assert am.bodies == []


async def test_an_alert_that_vanishes_after_firing_is_sent_resolved(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(am, clock, alerts)
    await d.deliver_once()
    alerts.clear()
    clock.advance(5)
    assert await d.deliver_once() == 1
    assert am.bodies[-1][0]["endsAt"] == iso(clock.now)


async def test_an_escalation_resolves_the_warning_and_fires_the_critical(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    warning = alert(clock, name="PoolwatchSlotLeak", severity=Severity.WARNING)
    alerts = [warning]
    d = deliverer(am, clock, alerts)
    await d.deliver_once()
    clock.advance(5)
    alerts[0] = replace(warning, severity=Severity.CRITICAL)
    await d.deliver_once()
    sent = {(a["labels"]["severity"], a["endsAt"] == iso(clock.now)) for a in am.bodies[-1]}
    assert sent == {("warning", True), ("critical", False)}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: FakeAlertmanager(status=500), id="500s"),
        pytest.param(
            lambda: FakeAlertmanager(error=lambda r: httpx.ConnectError("refused", request=r)), id="down"
        ),
        pytest.param(
            lambda: FakeAlertmanager(error=lambda r: httpx.ReadTimeout("slow", request=r)), id="slow"
        ),
    ],
)
async def test_nothing_is_lost_through_an_outage(
    clock: FakeClock, make: Callable[[], FakeAlertmanager]
) -> None:
    failure = make()
    alerts = [alert(clock, labels=(*LABELS[:1], ("pool", "full"), *LABELS[2:])), alert(clock)]
    d = deliverer(failure, clock, alerts)
    delays = []
    for _ in range(6):
        await d.deliver_once()
        assert d.outbox.due(clock.now) == []  # backing off
        delays.append(d.outbox.retry_at - clock.now)
        clock.advance(delays[-1])
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert d.stats().counts["sent"] == 0
    assert d.stats().counts["failed"] == 12
    assert d.stats().queued == 2
    alerts[0] = replace(alerts[0], state=AlertState.RESOLVED, resolved_at=clock.now)
    failure.status, failure.error = 200, None  # Alertmanager is back
    assert await d.deliver_once() == 2
    states = sorted((a["labels"]["pool"], a["endsAt"] == iso(clock.now)) for a in failure.bodies[-1])
    assert states == [("full", True), ("mamba", False)]
    assert d.stats().queued == 0


async def test_resolutions_beyond_the_queue_bound_are_dropped_oldest_first(clock: FakeClock) -> None:
    down = FakeAlertmanager(status=503)
    alerts = [alert(clock, labels=(("pool", str(i)),)) for i in range(5)]
    d = deliverer(down, clock, alerts, capacity=3)
    d.outbox.update(alerts, clock.now)
    d.outbox.delivered(alerts, clock.now)  # all five were told firing
    for i in range(5):
        clock.advance(1)
        alerts[i] = replace(alerts[i], state=AlertState.RESOLVED, resolved_at=clock.now)
    await d.deliver_once()
    assert d.stats().queued == 3
    assert d.stats().counts["dropped"] == 2
    down.status = 200
    clock.advance(5)
    await d.deliver_once()
    assert sorted(a["labels"]["pool"] for a in down.bodies[-1]) == ["2", "3", "4"]


async def test_the_webhook_gets_an_alertmanager_shaped_payload(clock: FakeClock) -> None:
    hook = FakeAlertmanager()
    alerts = [
        alert(clock),
        alert(clock, AlertState.RESOLVED, labels=(("pool", "full"), ("worker", "prefill-0"))),
    ]
    receiver = WebhookReceiver("https://hooks.example/poolwatch")
    d = deliverer(hook, clock, alerts, receiver=receiver)
    d.outbox.update([replace(alerts[1], state=AlertState.FIRING)], clock.now)
    d.outbox.delivered([replace(alerts[1], state=AlertState.FIRING)], clock.now)
    await d.deliver_once()
    [body] = hook.bodies
    assert receiver.name == "webhook:hooks.example"  # the path may hold the secret
    assert (body["version"], body["status"]) == ("4", "firing")
    assert body["commonLabels"] == {
        "alertname": "PoolwatchDoubleFree",
        "severity": "critical",
        "worker": "prefill-0",
    }
    assert sorted(a["status"] for a in body["alerts"]) == ["firing", "resolved"]
    firing = next(a for a in body["alerts"] if a["status"] == "firing")
    assert firing["endsAt"] == "0001-01-01T00:00:00Z"


async def test_the_run_loop_ticks_on_the_injected_sleep(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    ticks: list[float] = []

    async def sleep(seconds: float) -> None:
        ticks.append(seconds)
        clock.advance(seconds)
        if len(ticks) == 130:
            raise RuntimeError("enough")

    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = AlertmanagerReceiver("http://am.example:9093/", resend_interval=60.0)
    d = Deliverer(recv, client, lambda: [alert(clock)], clock, resend_interval=60.0, sleep=sleep)
    with pytest.raises(RuntimeError, match="enough"):
        await d.run()
    assert set(ticks) == {1.0}
    assert len(am.bodies) == 3  # at 0 s, 60 s and 120 s
    assert recv.url == "http://am.example:9093/api/v2/alerts"


async def test_after_a_failed_attempt_every_firing_alert_is_told_again_on_recovery(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts = [alert(clock)]
    d = deliverer(am, clock, alerts)
    assert await d.deliver_once() == 1
    clock.advance(10)
    alerts.append(alert(clock, labels=(("pool", "full"), ("worker", "prefill-0"))))
    am.status = 502
    assert await d.deliver_once() == 0
    am.status = 200
    clock.advance(1)
    assert await d.deliver_once() == 2  # the one told before the outage too: the receiver may have restarted


async def test_a_wake_delivers_a_new_firing_alert_without_waiting_for_the_tick(clock: FakeClock) -> None:
    am, alerts = FakeAlertmanager(), []
    never = asyncio.Event()

    async def sleep(seconds: float) -> None:
        await never.wait()  # a tick that never ends: only a wake can deliver

    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = AlertmanagerReceiver("http://am.example:9093", resend_interval=60.0)
    d = Deliverer(recv, client, lambda: alerts, clock, resend_interval=60.0, sleep=sleep)
    task = asyncio.create_task(d.run())
    for _ in range(5):
        await asyncio.sleep(0)
    assert am.bodies == []
    alerts.append(alert(clock))
    d.wake()
    for _ in range(50):
        if am.bodies:
            break
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [a["labels"]["alertname"] for a in am.bodies[0]] == [alerts[0].name]

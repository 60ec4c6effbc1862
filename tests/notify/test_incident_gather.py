"""One incident, one POST: alerts that start firing within ``gather`` seconds of one another (a
worker's TP ranks, each seen through its own probe) go to the receiver together, so the shipped
``group_wait: 0s`` pages once with all of them (docs/alerting.md).  Re-sends, cause updates and
resolutions never wait."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
import pytest
from tests.notify.fakes import LABELS, FakeAlertmanager, alert

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.delivery import Deliverer
from rigs.fakes.clock import FakeClock

GATHER = 0.2


def rank(clock: FakeClock, tp: int) -> Alert:
    """Rank ``tp``'s copy of the double free, firing from now on (after the deliverer started)."""
    clock.advance(0.001)
    labels = tuple(("tp_rank", str(tp)) if k == "tp_rank" else (k, v) for k, v in LABELS)
    return alert(clock, subject=f"prefill-0/dp0-tp{tp}-pp0", labels=labels)


def gathering(
    am: FakeAlertmanager, clock: FakeClock, alerts: list[Alert], peers: int | None = None
) -> Deliverer:
    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = AlertmanagerReceiver("http://am.example:9093", resend_interval=60.0)
    count = None if peers is None else (lambda _: peers)
    return Deliverer(recv, client, lambda: alerts, clock, resend_interval=60.0, gather=GATHER, peers=count)


def tp_ranks(body: list[dict[str, dict[str, str]]]) -> list[str]:
    return sorted(a["labels"]["tp_rank"] for a in body)


async def test_a_tp_peer_detected_within_the_window_goes_out_in_the_same_post(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts: list[Alert] = []
    d = gathering(am, clock, alerts)
    alerts.append(rank(clock, 0))
    assert await d.deliver_once() == 0  # the first rank waits for its peers
    assert d.outbox.ready_at() == pytest.approx(clock.now + GATHER)
    clock.advance(0.03)
    alerts.append(rank(clock, 1))
    assert await d.deliver_once() == 0  # the window counts from the first of them
    clock.advance(d.outbox.ready_at() - clock.now - 0.01)
    assert await d.deliver_once() == 0
    clock.advance(0.01)
    assert await d.deliver_once() == 2
    assert [tp_ranks(b) for b in am.bodies] == [["0", "1"]]
    assert d.outbox.ready_at() == 0.0


async def test_without_a_window_each_rank_is_posted_alone(clock: FakeClock) -> None:
    """What the window prevents (Alertmanager with a 0s wait would page for rank 0 alone)."""
    am = FakeAlertmanager()
    alerts = [rank(clock, 0)]
    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = AlertmanagerReceiver("http://am.example:9093", resend_interval=60.0)
    d = Deliverer(recv, client, lambda: alerts, clock, resend_interval=60.0)
    assert await d.deliver_once() == 1
    clock.advance(0.03)
    alerts.append(rank(clock, 1))
    assert await d.deliver_once() == 1
    assert [tp_ranks(b) for b in am.bodies] == [["0"], ["1"]]


async def test_re_sends_updates_and_resolutions_do_not_wait(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts: list[Alert] = []
    d = gathering(am, clock, alerts)
    alerts.append(rank(clock, 0))
    await d.deliver_once()
    clock.advance(GATHER)
    assert await d.deliver_once() == 1  # told
    clock.advance(1.0)
    alerts[0] = replace(alerts[0], annotations={**alerts[0].annotations, "description": "slot [452]"})
    assert await d.deliver_once() == 1  # the cause changed: an update, at once
    clock.advance(60.0)
    assert await d.deliver_once() == 1  # the re-send, at once
    alerts[0] = replace(alerts[0], state=AlertState.RESOLVED, resolved_at=clock.now)
    assert await d.deliver_once() == 1  # the resolution, at once
    assert len(am.bodies) == 4


async def test_the_run_loop_sleeps_only_until_the_window_closes(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock.advance(seconds)
        if am.bodies:
            raise asyncio.CancelledError

    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = AlertmanagerReceiver("http://am.example:9093", resend_interval=60.0)
    alerts: list[Alert] = []
    d = Deliverer(recv, client, lambda: alerts, clock, resend_interval=60.0, gather=GATHER, sleep=sleep)
    alerts += [rank(clock, 0), rank(clock, 1)]
    with pytest.raises(asyncio.CancelledError):
        await d.run()
    assert pauses[0] == pytest.approx(GATHER, abs=0.01)  # until the window closes, not the 1 s tick
    assert [tp_ranks(b) for b in am.bodies] == [["0", "1"]]


async def test_an_alert_that_fired_before_the_deliverer_started_does_not_wait(clock: FakeClock) -> None:
    """Restored after a sidecar restart: its incident's other alerts were restored with it."""
    am = FakeAlertmanager()
    alerts = [rank(clock, 0), rank(clock, 1)]
    d = gathering(am, clock, alerts)
    assert await d.deliver_once() == 2


async def test_the_post_goes_as_soon_as_every_tp_peer_has_fired(clock: FakeClock) -> None:
    """The sidecar knows the worker's TP ranks (its store): with both copies in, nothing waits."""
    am = FakeAlertmanager()
    alerts: list[Alert] = []
    d = gathering(am, clock, alerts, peers=2)
    alerts.append(rank(clock, 0))
    assert await d.deliver_once() == 0  # rank 1 has not fired yet
    alerts.append(rank(clock, 1))
    assert await d.deliver_once() == 2  # both in: at once, not GATHER after the first
    assert [tp_ranks(b) for b in am.bodies] == [["0", "1"]]


async def test_a_peer_that_never_fires_holds_the_post_for_the_window_only(clock: FakeClock) -> None:
    am = FakeAlertmanager()
    alerts: list[Alert] = []
    d = gathering(am, clock, alerts, peers=2)
    alerts.append(rank(clock, 0))
    assert await d.deliver_once() == 0
    clock.advance(GATHER)
    assert await d.deliver_once() == 1

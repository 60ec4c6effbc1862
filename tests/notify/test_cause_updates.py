"""Updates reach every receiver: when a firing alert's cause changes (it gained its slot ids, its
hook, an exact basis), Alertmanager gets the new annotations at the next tick and a plain webhook
gets an update message; a new iteration or a growing gap is not news."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.notify.fakes import FakeAlertmanager, alert, deliverer

from poolwatch.detect.alert import Alert
from poolwatch.notify.cause import cause
from poolwatch.notify.webhook import WebhookReceiver
from rigs.fakes.clock import FakeClock

COUNTS = (
    "The mamba pool of prefill-0 (prefill, dp 0 tp 1 pp 0) counts 1 slot twice (gap -1): a double free "
    "[exact figures from the in-process probe, iteration {seq}]. SGLang's idle check is strict on this "
    "rank: the server will crash at its next idle moment."
)
IDS = (
    "The mamba pool of prefill-0 (prefill, dp 0 tp 1 pp 0) counts 1 slot twice (gap -1): a double free "
    "[exact figures from the in-process probe, iteration {seq}]. Tripwire free_duplicate: 1 slot [452] "
    "first seen after process_prefill_chunk at iteration 17. SGLang's idle check is strict on this rank: "
    "the server will crash at its next idle moment."
)


def described(clock: FakeClock, text: str) -> Alert:
    base = alert(clock)
    return replace(base, annotations={**base.annotations, "description": text})


def test_the_iteration_and_the_figures_are_not_the_cause_but_slot_ids_are() -> None:
    clock = FakeClock()
    assert cause(described(clock, COUNTS.format(seq=17))) == cause(described(clock, COUNTS.format(seq=95)))
    grown = COUNTS.replace("1 slot twice (gap -1)", "3 slots twice (gap -3)")
    assert cause(described(clock, grown.format(seq=95))) == cause(described(clock, COUNTS.format(seq=17)))
    assert cause(described(clock, IDS.format(seq=17))) != cause(described(clock, COUNTS.format(seq=17)))
    other = IDS.replace("[452]", "[453]")
    assert cause(described(clock, IDS.format(seq=17))) != cause(described(clock, other.format(seq=17)))


@pytest.mark.parametrize("kind", ["alertmanager", "webhook"])
async def test_a_firing_alert_that_gains_its_slot_ids_is_told_again_at_the_next_tick(
    clock: FakeClock, kind: str
) -> None:
    receiver = FakeAlertmanager()
    alerts = [described(clock, COUNTS.format(seq=17))]
    hook = WebhookReceiver("https://hooks.example/poolwatch") if kind == "webhook" else None
    d = deliverer(receiver, clock, alerts, receiver=hook)
    assert await d.deliver_once() == 1
    clock.advance(1)
    alerts[0] = described(clock, COUNTS.format(seq=18))  # only the iteration moved
    assert await d.deliver_once() == 0
    clock.advance(1)
    alerts[0] = described(clock, IDS.format(seq=19))
    assert await d.deliver_once() == 1  # at once, not at the next re-send a minute later
    clock.advance(1)
    alerts[0] = described(clock, IDS.format(seq=20))
    assert await d.deliver_once() == 0
    items = [b["alerts"] if kind == "webhook" else b for b in receiver.bodies]
    last = items[-1][0]["annotations"]["description"]
    assert "[452]" in last
    assert "process_prefill_chunk" in last


async def test_an_update_that_fails_is_told_once_the_webhook_answers_2xx(clock: FakeClock) -> None:
    receiver = FakeAlertmanager()
    alerts = [described(clock, COUNTS.format(seq=17))]
    d = deliverer(receiver, clock, alerts, receiver=WebhookReceiver("https://hooks.example/poolwatch"))
    assert await d.deliver_once() == 1
    alerts[0] = described(clock, IDS.format(seq=19))
    receiver.status = 500
    assert await d.deliver_once() == 0
    assert d.outbox.delivered_firing() == frozenset()  # the update was not acknowledged
    receiver.status = 200
    clock.advance(120)
    assert await d.deliver_once() == 1
    assert d.outbox.delivered_firing() == {alerts[0].fingerprint}
    assert "[452]" in receiver.bodies[-1]["alerts"][0]["annotations"]["description"]

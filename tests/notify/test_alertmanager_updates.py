"""An alert whose cause changes reaches Alertmanager as an update it notifies: the copy under the
old ``poolwatch_detail`` resolved (marked superseded), the copy under the new one firing, in one
post; a new iteration or a growing gap is no update; a failed post is retried whole."""

from __future__ import annotations

from dataclasses import replace

from tests.notify.fakes import FakeAlertmanager, alert, deliverer

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.notify.alertmanager import detail, iso, postable_alerts
from poolwatch.notify.paths import DETAIL_LABEL, SUPERSEDED
from rigs.fakes.clock import FakeClock

COUNTS = "The mamba pool of prefill-0 counts 1 slot twice (gap -1): a double free [iteration 411]."
IDS = COUNTS + " Tripwire free_duplicate: 1 slot [452] first seen after process_prefill_chunk."


def described(clock: FakeClock, text: str, state: AlertState = AlertState.FIRING) -> Alert:
    return alert(clock, state, annotations={"summary": "s", "description": text})


def test_the_detail_changes_with_the_cause_not_with_the_figures(clock: FakeClock) -> None:
    first = described(clock, COUNTS)
    assert detail(first) == detail(described(clock, COUNTS.replace("411", "412")))
    assert detail(first) == detail(
        described(clock, COUNTS.replace("1 slot twice (gap -1)", "3 slots twice (gap -3)"))
    )
    assert detail(first) != detail(described(clock, IDS))


def test_a_new_cause_resolves_the_old_copy_and_fires_the_new_one_in_one_post(clock: FakeClock) -> None:
    held: dict[str, str] = {}
    counts, ids = described(clock, COUNTS), described(clock, IDS)
    (first,) = postable_alerts([counts], clock.now, 60.0, held)
    assert first["labels"][DETAIL_LABEL] == detail(counts)
    clock.advance(5)
    old, new = postable_alerts([ids], clock.now, 60.0, held)
    assert old["labels"] == first["labels"]  # the same copy, ended now and marked
    assert old["endsAt"] == iso(clock.now)
    assert SUPERSEDED in old["annotations"]
    assert f"{DETAIL_LABEL}={detail(ids)}" in old["annotations"][SUPERSEDED]
    assert new["labels"] == {**first["labels"], DETAIL_LABEL: detail(ids)}
    assert new["annotations"]["description"] == IDS
    assert SUPERSEDED not in new["annotations"]
    assert new["startsAt"] == first["startsAt"]  # one incident: it began when it first fired
    assert held == {ids.fingerprint: detail(ids)}
    (again,) = postable_alerts([ids], clock.now + 60, 60.0, held)  # a re-send: nothing superseded
    assert again["labels"] == new["labels"]


def test_a_resolution_ends_the_copy_alertmanager_holds(clock: FakeClock) -> None:
    held: dict[str, str] = {}
    postable_alerts([described(clock, IDS)], clock.now, 60.0, held)
    clock.advance(10)
    # the resolved alert's text may read differently: the held copy is the one resolved
    (gone,) = postable_alerts([described(clock, COUNTS, AlertState.RESOLVED)], clock.now, 60.0, held)
    assert gone["labels"][DETAIL_LABEL] == detail(described(clock, IDS))
    assert held == {}


async def test_the_receiver_remembers_a_detail_only_once_alertmanager_took_it(clock: FakeClock) -> None:
    am, alerts = FakeAlertmanager(), [described(clock, COUNTS)]
    d = deliverer(am, clock, alerts)
    assert await d.deliver_once() == 1
    clock.advance(1)
    alerts[0] = described(clock, IDS)
    am.status = 503
    assert await d.deliver_once() == 0
    am.status = 200
    clock.advance(2)
    assert await d.deliver_once() == 1
    retried = am.bodies[-1]
    assert [(a["labels"][DETAIL_LABEL], SUPERSEDED in a["annotations"]) for a in retried] == [
        (detail(described(clock, COUNTS)), True),
        (detail(described(clock, IDS)), False),
    ]
    clock.advance(1)
    alerts[0] = replace(alerts[0], annotations={"summary": "s", "description": IDS.replace("411", "420")})
    assert await d.deliver_once() == 0  # a new iteration is not news

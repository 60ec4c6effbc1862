"""Fakes for the notify tests: an alert built on a fake clock, a fake Alertmanager (or webhook) that
records what it is posted, and a :class:`Deliverer` wired to it over ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.detect.schema import Severity
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.delivery import Deliverer
from rigs.fakes.clock import FakeClock

LABELS = (
    ("dp_rank", "0"),
    ("pool", "mamba"),
    ("pp_rank", "0"),
    ("role", "prefill"),
    ("tp_rank", "1"),
    ("worker", "prefill-0"),
)


def alert(clock: FakeClock, state: AlertState = AlertState.FIRING, **changes: Any) -> Alert:
    base = Alert(
        name="PoolwatchDoubleFree",
        subject="prefill-0/dp0-tp1-pp0",
        severity=Severity.CRITICAL,
        state=state,
        labels=LABELS,
        annotations={"summary": "s", "description": "d", "dashboard_url": ""},
        value=1.0,
        active_since=clock.now,
        fired_at=clock.now,
        last_seen=clock.now,
        resolved_at=clock.now if state is AlertState.RESOLVED else None,
    )
    return replace(base, **changes)


@dataclass
class FakeAlertmanager:
    """Answers POST /api/v2/alerts with ``status`` (or raises ``error``), recording every body."""

    status: int = 200
    error: Callable[[httpx.Request], Exception] | None = None
    bodies: list[Any] = field(default_factory=list)
    headers: list[httpx.Headers] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.error is not None:
            raise self.error(request)
        self.headers.append(request.headers)
        self.bodies.append(json.loads(request.content))
        return httpx.Response(self.status, json={} if self.status == 200 else {"error": "boom"})


def deliverer(
    am: FakeAlertmanager, clock: FakeClock, alerts: list[Alert], receiver: Any = None, capacity: int = 1000
) -> Deliverer:
    client = httpx.AsyncClient(transport=httpx.MockTransport(am))
    recv = receiver or AlertmanagerReceiver("http://am.example:9093", resend_interval=60.0)
    return Deliverer(recv, client, lambda: alerts, clock, resend_interval=60.0, capacity=capacity)

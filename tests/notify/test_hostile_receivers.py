"""A hostile receiver costs a bounded amount, and a receiver's secret is never shown.

* An endless answer body is never read (a 2xx) or read at most ``MAX_ANSWER_BYTES`` (a refusal):
  before, ``client.post`` read it whole, gigabytes, until a ``MemoryError``.
* A receiver that never finishes answering (one byte every few seconds) is cut at the deliverer's
  total deadline, and another receiver's deliveries go on meanwhile.
* A receiver's URL with a user, a password, a token in the path and a key in the query is named
  ``alertmanager:<host:port>`` / ``webhook:<host>`` in the metrics, the logs and every error.

The network is ``httpx.MockTransport``; the hostile tier (tests/hostile/test_hostile_receiver.py)
runs the same against real listeners.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.detect.sidecar import seeded, settings
from tests.notify.fakes import alert

from poolwatch.errors import DeliveryError
from poolwatch.model.snapshot import Snapshot
from poolwatch.notify.alertmanager import MAX_ANSWER_BYTES, AlertmanagerReceiver, post_json
from poolwatch.notify.delivery import Deliverer
from poolwatch.notify.webhook import WebhookReceiver
from poolwatch.sidecar.alerting import build_alerting
from rigs.fakes.clock import FakeClock

SECRET_AM = "https://oncall:hunter2@am.example:9093/prefix/?token=t0ps3cret"
SECRET_HOOK = "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX?key=k3y"
SECRETS = ("oncall", "hunter2", "t0ps3cret", "XXXXSECRETXXXX", "k3y", "/services/", "/prefix")


class Endless(httpx.AsyncByteStream):
    """An answer body that never ends; counts what was pulled from it."""

    def __init__(self) -> None:
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.pulled += 65536
            yield b"x" * 65536


@pytest.mark.parametrize("status", [200, 202, 500, 503])
async def test_an_endless_answer_is_read_at_most_a_few_kilobytes(status: int) -> None:
    body = Endless()
    transport = httpx.MockTransport(lambda _: httpx.Response(status, stream=body))
    async with httpx.AsyncClient(transport=transport) as client:
        if status < 300:
            await post_json(client, "http://am.example:9093/api/v2/alerts", [])
        else:
            with pytest.raises(DeliveryError, match=rf"HTTP {status} from http://am.example:9093: x{{200}}$"):
                await post_json(client, "http://am.example:9093/api/v2/alerts", [])
    assert body.pulled <= (0 if status < 300 else MAX_ANSWER_BYTES + 65536)


async def test_a_receiver_that_never_finishes_answering_fails_at_the_deadline_and_delays_no_other(
    clock: FakeClock,
) -> None:
    stuck = asyncio.Event()  # never set: the trickle that never ends

    async def slow(request: httpx.Request) -> httpx.Response:
        await stuck.wait()
        return httpx.Response(200)

    fast_posts: list[httpx.Request] = []

    def fast(request: httpx.Request) -> httpx.Response:
        fast_posts.append(request)
        return httpx.Response(200, json={})

    alerts = [alert(clock)]

    def deliverer(handler: object, url: str) -> Deliverer:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))  # type: ignore[arg-type]
        receiver = AlertmanagerReceiver(url, resend_interval=60.0)
        return Deliverer(receiver, client, lambda: alerts, clock, deadline=0.2)

    slow_one, fast_one = (
        deliverer(slow, "http://slow.example:9093"),
        deliverer(fast, "http://fast.example:9093"),
    )
    slow_task = asyncio.ensure_future(slow_one.deliver_once())
    assert await fast_one.deliver_once() == 1  # the fast receiver got its page ...
    assert not slow_task.done()  # ... while the slow one is still being answered
    assert await slow_task == 0  # then the slow one's attempt ends at its deadline
    assert slow_one.stats().counts["failed"] == 1
    assert slow_one.outbox.queued == 1  # still due: it is retried after the back-off
    assert len(fast_posts) == 1


async def test_a_receivers_secret_is_in_no_error_and_no_log_line(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, text=f"bad credentials for {request.url}\nmore")

    alerts = [alert(clock)]
    for receiver in (AlertmanagerReceiver(SECRET_AM, 60.0), WebhookReceiver(SECRET_HOOK)):
        client = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
        with caplog.at_level(logging.WARNING, logger="poolwatch.notify"):
            assert await Deliverer(receiver, client, lambda: alerts, clock).deliver_once() == 0
    assert [r.getMessage().split(" error=")[0] for r in caplog.records] == [
        "delivery failed receiver=alertmanager:am.example:9093",
        "delivery failed receiver=webhook:hooks.slack.example",
    ]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP 401 from https://am.example:9093: bad credentials for https://am.example:9093" in logged
    for secret in SECRETS:
        assert secret not in logged


async def test_no_receivers_secret_reaches_metrics_and_two_receivers_on_one_host_keep_apart(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    other = SECRET_HOOK.replace("XXXXSECRETXXXX", "YYYYOTHERYYYY")
    configured = settings(tmp_path, alertmanager_urls=(SECRET_AM,), webhook_urls=(SECRET_HOOK, other))
    store, _ = seeded(clock, seed_snapshot)
    wiring = build_alerting(
        configured, store, clock, transport=httpx.MockTransport(lambda _: httpx.Response(200))
    )
    await wiring.start()
    await wiring.stop()
    assert [s.receiver for s in wiring.delivery_stats()] == [
        "alertmanager:am.example:9093",
        "webhook:hooks.slack.example",
        "webhook:hooks.slack.example#2",
    ]
    registry = CollectorRegistry()
    registry.register(wiring.collector)
    exposition = generate_latest(registry).decode()
    assert 'receiver="webhook:hooks.slack.example#2"' in exposition
    for secret in (*SECRETS, "YYYYOTHERYYYY"):
        assert secret not in exposition


@pytest.mark.parametrize("credential", ["bearer", "basic"])
async def test_a_receiver_gets_only_its_own_credentials_the_alertmanagers_never_reach_a_webhook(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot, credential: str
) -> None:
    """Before: the bearer token went to every receiver, the Slack webhook included (issue 42)."""
    secret = tmp_path / "secret"
    secret.write_text("AM-ONLY-CREDENTIAL\n")
    auth = (
        {"bearer_token_file": str(secret)}
        if credential == "bearer"
        else {"basic_auth_user": "am-user", "basic_auth_password_file": str(secret)}
    )
    configured = settings(
        tmp_path,
        alertmanager_urls=("http://am.example:9093",),
        webhook_urls=("https://hooks.slack.example/services/T0/B0/X", "https://pd.example/hook"),
        **auth,
    )
    seen: dict[str, list[str]] = {}

    def record(request: httpx.Request) -> httpx.Response:
        seen.setdefault(request.url.host, []).append(request.headers.get("authorization", ""))
        return httpx.Response(200)

    store, seed = seeded(clock, seed_snapshot)
    wiring = build_alerting(configured, store, clock, transport=httpx.MockTransport(record))
    await wiring.start()
    try:
        store.put(seed)  # the seed's double free: every receiver is paged
        wiring.evaluate()
        for deliverer in wiring._deliverers:
            await deliverer.deliver_once()
    finally:
        await wiring.stop()
    assert set(seen) == {"am.example", "hooks.slack.example", "pd.example"}
    assert all(h.startswith(("Bearer ", "Basic ")) for h in seen["am.example"])
    assert seen["hooks.slack.example"] == [""] * len(seen["hooks.slack.example"])
    assert seen["pd.example"] == [""] * len(seen["pd.example"])

"""The one wiring point for the sidecar's alerts (the values are :mod:`poolwatch.detect.alert`):
:func:`build_alerting` returns an :class:`AlertWiring` with

* ``collector`` — register it in the sidecar's registry (alerts, leak trends, delivery metrics);
* ``router`` — mount it in the app (``GET /api/v1/alerts``);
* ``await start()`` / ``await stop()`` — call them from the lifespan: they own the evaluation
  timer, the notifier tasks and their HTTP client;
* ``evaluate(now)`` — one timer turn (tests call it directly).

The detector is subscribed to the store at build time, and firing alerts saved by a previous run
(``state_file``) are taken back then (a corrupt file is set aside and counted, one someone else
could have written is refused and counted, stale temporary files of a killed write are removed),
with the resolved notices each receiver was still owed.  Every background
task runs under ``supervisor`` (:mod:`poolwatch.sidecar.supervise`): a crash is logged, counted
and the task restarted with backoff; a state file that cannot be written is logged on the change
and counted, and evaluation goes on.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from fastapi import APIRouter

from poolwatch.addresses import distinct
from poolwatch.detect.alert import Alert
from poolwatch.detect.detector import Detector
from poolwatch.errors import ConfigError
from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.client import build_client
from poolwatch.notify.delivery import Deliverer, DeliveryStats, Receiver
from poolwatch.notify.outbox import INCIDENT_GATHER_S
from poolwatch.notify.paths import DIRECT, PATH_LABEL
from poolwatch.notify.webhook import WebhookReceiver
from poolwatch.settings.groups import AlertSettings
from poolwatch.settings.receivers import ReceiverAccess, receiver_access
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerts_api import alerts_router
from poolwatch.sidecar.keeper import StateKeeper
from poolwatch.sidecar.metrics.alerts import AlertCollector
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sidecar.supervise import Supervisor
from poolwatch.target_state import DirectoryHealth

__all__ = ["AlertWiring", "build_alerting"]

log = logging.getLogger("poolwatch.sidecar")

Sleep = Callable[[float], Awaitable[None]]


def _receivers(settings: AlertSettings) -> list[Receiver]:
    for url in (*settings.alertmanager_urls, *settings.webhook_urls):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"alerting: {url!r} is not an http(s) URL")
    out: list[Receiver] = [
        AlertmanagerReceiver(u, settings.resend_interval) for u in settings.alertmanager_urls
    ]
    out += [WebhookReceiver(u) for u in settings.webhook_urls]
    for receiver, name in zip(out, distinct(r.name for r in out), strict=True):
        receiver.name = name  # two receivers on one host: "webhook:hooks.slack.com#2"
    return out


class AlertWiring:
    def __init__(
        self,
        detector: Detector,
        store: SnapshotStore,
        settings: AlertSettings,
        clock: Callable[[], float],
        *,
        access: ReceiverAccess | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        forget_after: float = 3600.0,
    ) -> None:
        self.detector = detector
        self._store = store
        self._forget_after = forget_after
        self._settings = settings
        self._access = access or receiver_access(settings)
        self._clock = clock
        self._transport = transport
        self._sleep = sleep
        self._receivers = _receivers(settings)
        self._deliverers: list[Deliverer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fired = 0  # the detector's count of alerts that started firing, when last told
        self._client: httpx.AsyncClient | None = None  # Alertmanager's: with its credentials
        self._plain: httpx.AsyncClient | None = None  # the webhooks': none (each URL is its own secret)
        self.supervisor = Supervisor()
        self.keeper = StateKeeper(Path(settings.state_file) if settings.state_file else None, self.supervisor)
        self.collector = AlertCollector(detector, self.delivery_stats)
        self.router: APIRouter = alerts_router(detector.alerts)
        # what the discovery scan found of the probe directory (the sidecar pages it: PoolwatchProbeRefused,
        # PoolwatchProbeDirectoryLost); None: no directory watched
        self.directory: Callable[[], DirectoryHealth | None] | None = None

    def restore(self) -> int:
        """Take back the alerts of the state file; returns how many."""
        alerts = self.keeper.restore()
        self.detector.restore(alerts)
        return len(alerts)

    def evaluate(self, now: float | None = None) -> list[Alert]:
        now = self._clock() if now is None else now
        self.forget_departed(now)
        directory = self.directory() if self.directory is not None else None
        alerts = self.detector.evaluate(
            now, latest=self._store.latest(), targets=self._store.targets(), directory=directory
        )
        for deliverer in self._deliverers:  # what each receiver is owed now, saved below with the alerts
            deliverer.outbox.update(alerts, now)
        self.keeper.save(alerts)
        return alerts

    def forget_departed(self, now: float) -> list[str]:
        """Ranks no source has reported for ``forget_after`` seconds are gone for good: the store
        and the detector drop them and their alerts resolve, saying why."""
        gone = self._store.forget_silent(now - self._forget_after)
        if gone:
            reason = f"the rank reported nothing for {self._forget_after:g} s and was forgotten"
            self.detector.forget(gone, reason, now)
        return gone

    def delivery_stats(self) -> list[DeliveryStats]:
        return [d.stats() for d in self._deliverers]

    def wake_on_firing(self, _snap: object = None) -> None:
        """A store listener (after the detector's): a newly firing alert wakes every deliverer at
        once instead of at its next tick.  Safe from any thread."""
        fired = self.detector.fired()
        new, self._fired = fired != self._fired, fired
        if new and self._loop is not None:
            for deliverer in self._deliverers:
                self._loop.call_soon_threadsafe(deliverer.wake)

    async def start(self) -> None:
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        x, transport = self._access, self._transport
        self._client = build_client(
            token=x.token, basic_auth=x.basic_auth, verify=x.verify, ca_file=x.ca_file, transport=transport
        )
        self._plain = build_client(verify=x.verify, ca_file=x.ca_file, transport=transport)
        self._deliverers = [
            Deliverer(
                r,
                self._client if isinstance(r, AlertmanagerReceiver) else self._plain,
                self.detector.alerts,
                self._clock,
                resend_interval=self._settings.resend_interval,
                capacity=self._settings.notify_queue,
                gather=INCIDENT_GATHER_S,  # one incident, one POST (a 0s group_wait pages at once)
                peers=lambda a: self._store.tp_peers(dict(a.labels)),
                sleep=self._sleep,
                deadline=self._settings.notify_timeout,
            )
            for r in self._receivers
        ]
        self.keeper.hand_over(self._deliverers, self._clock())
        self._tasks = [self.supervisor.start("poolwatch-alert-timer", self._timer)]
        self._tasks += [
            self.supervisor.start(f"poolwatch-notify-{d.receiver.name}", d.run) for d in self._deliverers
        ]

    async def stop(self, timeout: float = 2.0) -> None:
        await self.supervisor.stop(timeout)
        self._tasks = []
        for client in (self._client, self._plain):
            if client is not None:
                await client.aclose()
        self._client = self._plain = None
        self.keeper.save(self.detector.alerts())

    async def _timer(self) -> None:
        while True:
            self.evaluate()
            await self._sleep(self._settings.evaluate_interval)


def alert_labels(items: tuple[str, ...]) -> dict[str, str]:
    """``name=value`` items (``POOLWATCH_ALERT_LABELS``) as labels; a bad one is a ``ConfigError``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()) or not value.strip():
            raise ConfigError(f"POOLWATCH_ALERT_LABELS: expected name=value, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def build_alerting(
    settings: Settings,
    store: SnapshotStore,
    clock: Callable[[], float],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    sleep: Sleep = asyncio.sleep,
) -> AlertWiring:
    """Detector + notifiers for the sidecar; a bad setting raises :class:`ConfigError` here."""
    a = settings.alerting
    access = receiver_access(a)  # unreadable secrets or CA files fail now, not at the first page
    ident = settings.identity
    labels = {**alert_labels(a.alert_labels), "namespace": ident.namespace, "pod": ident.pod}
    labels[PATH_LABEL] = DIRECT  # the shipped inhibit rule silences the rule copy while this one fires
    detector = Detector(settings.mixin(), clock, extra_labels=labels)
    forget = ident.forget_after
    alerting = AlertWiring(
        detector, store, a, clock, access=access, transport=transport, sleep=sleep, forget_after=forget
    )
    alerting.restore()
    store.subscribe(detector.observe)
    store.subscribe(alerting.wake_on_firing)
    return alerting

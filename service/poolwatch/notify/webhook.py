"""A generic JSON webhook, in the shape of Alertmanager's webhook payload (version 4), so that
receivers written for Alertmanager (chat bridges, incident tools) accept poolwatch directly.

A webhook does not deduplicate, so it gets exactly one ``firing`` message per alert (and one
``resolved``): no periodic re-send, no re-telling after an outage, and alerts restored from the
state file after a restart count as already told (``resends = False``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from poolwatch.addresses import shown_host
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.notify.alertmanager import iso, post_json

__all__ = ["WebhookReceiver", "webhook_payload"]

_ZERO = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended yet"


def _common(alerts: Sequence[Alert]) -> dict[str, str]:
    if not alerts:
        return {}
    first = alerts[0].all_labels
    return {k: v for k, v in first.items() if all(a.all_labels.get(k) == v for a in alerts[1:])}


def webhook_payload(alerts: Sequence[Alert], receiver: str = "poolwatch") -> dict[str, Any]:
    firing = any(a.state is AlertState.FIRING for a in alerts)
    items = []
    for a in alerts:
        resolved = a.state is AlertState.RESOLVED
        items.append(
            {
                "status": "resolved" if resolved else "firing",
                "labels": a.all_labels,
                "annotations": dict(a.annotations),
                "startsAt": iso(a.fired_at if a.fired_at is not None else a.active_since),
                "endsAt": iso(a.resolved_at) if resolved and a.resolved_at is not None else _ZERO,
                "fingerprint": a.fingerprint,
            }
        )
    return {
        "version": "4",
        "receiver": receiver,
        "status": "firing" if firing else "resolved",
        "alerts": items,
        "groupLabels": {},
        "commonLabels": _common(alerts),
        "commonAnnotations": {},
        "externalURL": "",
    }


class WebhookReceiver:
    def __init__(self, url: str) -> None:
        self.url = url
        self.name = "webhook:" + shown_host(url)  # a Slack-style webhook's secret is its path
        self.resends = False

    async def send(self, client: httpx.AsyncClient, alerts: Sequence[Alert], now: float) -> None:
        await post_json(client, self.url, webhook_payload(alerts))

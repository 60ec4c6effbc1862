"""Alertmanager API v2: ``POST /api/v2/alerts`` with the alerts' labels, annotations and times.

A firing alert is posted with ``endsAt`` a few re-send intervals ahead, as Prometheus does: while
poolwatch keeps re-sending, Alertmanager keeps it firing; if poolwatch vanished for good,
Alertmanager would resolve it by itself.  A resolved alert is posted with its real ``endsAt``.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Sequence
from typing import Any

import httpx

from poolwatch.detect.alert import Alert, AlertState
from poolwatch.errors import DeliveryError

__all__ = ["AlertmanagerReceiver", "iso", "postable_alerts"]


def iso(t: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager writes it."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def postable_alerts(alerts: Sequence[Alert], now: float, resend_interval: float) -> list[dict[str, Any]]:
    """The body of ``POST /api/v2/alerts`` (Alertmanager's ``postableAlerts``)."""
    out = []
    for a in alerts:
        resolved = a.state is AlertState.RESOLVED
        ends = (a.resolved_at or now) if resolved else now + 4 * resend_interval
        out.append(
            {
                "labels": {k: v for k, v in a.all_labels.items() if v},
                "annotations": {k: v for k, v in a.annotations.items() if v},
                "startsAt": iso(a.fired_at if a.fired_at is not None else a.active_since),
                "endsAt": iso(ends),
            }
        )
    return out


async def post_json(client: httpx.AsyncClient, url: str, body: Any) -> None:
    """POST ``body``; any transport error or non-2xx status is a :class:`DeliveryError`."""
    try:
        response = await client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise DeliveryError(f"HTTP {response.status_code} from {url}: {response.text[:200]}")


class AlertmanagerReceiver:
    def __init__(self, base_url: str, resend_interval: float) -> None:
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self.name = "alertmanager:" + (urllib.parse.urlsplit(base_url).netloc or base_url)
        self.resends = True  # Alertmanager deduplicates: firing alerts are re-sent so it never forgets
        self._resend = resend_interval

    async def send(self, client: httpx.AsyncClient, alerts: Sequence[Alert], now: float) -> None:
        await post_json(client, self.url, postable_alerts(alerts, now, self._resend))

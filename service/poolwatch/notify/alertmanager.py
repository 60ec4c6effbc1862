"""Alertmanager API v2: ``POST /api/v2/alerts`` with the alerts' labels, annotations and times.

A firing alert is posted with ``endsAt`` a few re-send intervals ahead, as Prometheus does: while
poolwatch keeps re-sending, Alertmanager keeps it firing; if poolwatch vanished for good,
Alertmanager would resolve it by itself.  A resolved alert is posted with its real ``endsAt``.

**Updates.**  Alertmanager re-notifies a group only when the group's set of alerts changes (or at
``repeat_interval``): new annotations on an alert it holds reach no receiver.  So each copy carries
:data:`~poolwatch.notify.paths.DETAIL_LABEL`, a digest of the alert's cause (:func:`detail`), and
when a firing alert's cause changes (it gained its slot ids, its hook, the crash warning) the
receiver posts, in one request, the copy under the old detail resolved (annotated
:data:`~poolwatch.notify.paths.SUPERSEDED`) and the copy under the new one firing.  Grouping and
inhibition ignore the label, so both stay in the alert's group: Alertmanager sends one update
notification at the group's next ``group_interval`` (same PagerDuty ``dedup_key``: the same
incident), and the sidecar's copy keeps silencing the rule copy throughout.

**A hostile receiver** costs a bounded amount: :func:`post_json` never reads a 2xx answer's body,
and reads at most :data:`MAX_ANSWER_BYTES` of a refusal's (to say why), so an endless body costs
nothing and a trickling one is cut by the deliverer's total deadline
(:class:`~poolwatch.notify.delivery.Deliverer`).  A receiver is named ``alertmanager:<host:port>``
(:func:`~poolwatch.addresses.shown_host`): no user, password, path or query in a label or a log.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any

import httpx

from poolwatch.addresses import scrub_urls, shown_host, shown_url
from poolwatch.detect.alert import Alert, AlertState
from poolwatch.errors import DeliveryError
from poolwatch.notify.cause import cause
from poolwatch.notify.paths import DETAIL_LABEL, SUPERSEDED

__all__ = ["MAX_ANSWER_BYTES", "AlertmanagerReceiver", "detail", "iso", "post_json", "postable_alerts"]

MAX_ANSWER_BYTES = 2048  # of a receiver's refusal, read only to say why it refused


def iso(t: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager writes it."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def detail(alert: Alert) -> str:
    """The alert's :data:`~poolwatch.notify.paths.DETAIL_LABEL`: 8 hex digits of its cause (it
    changes exactly when :func:`~poolwatch.notify.cause.cause` does)."""
    return hashlib.sha256(cause(alert).encode("utf-8")).hexdigest()[:8]


def _postable(
    alert: Alert, now: float, resend_interval: float, digest: str, replaced_by: str = ""
) -> dict[str, Any]:
    """One copy; ``replaced_by``: resolve it now, as the copy whose cause ``replaced_by`` replaced."""
    if replaced_by:
        ends = now
    elif alert.state is AlertState.RESOLVED:
        ends = alert.resolved_at or now
    else:
        ends = now + 4 * resend_interval
    annotations = {k: v for k, v in alert.annotations.items() if v}
    if replaced_by:
        annotations[SUPERSEDED] = f"the cause changed: see {DETAIL_LABEL}={replaced_by}"
    return {
        "labels": {**{k: v for k, v in alert.all_labels.items() if v}, DETAIL_LABEL: digest},
        "annotations": annotations,
        "startsAt": iso(alert.fired_at if alert.fired_at is not None else alert.active_since),
        "endsAt": iso(ends),
    }


def postable_alerts(
    alerts: Sequence[Alert],
    now: float,
    resend_interval: float,
    held: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The body of ``POST /api/v2/alerts`` (Alertmanager's ``postableAlerts``).  ``held``: the
    detail each alert's copy was last posted firing under (by fingerprint); a firing alert whose
    detail changed also resolves its old copy, and ``held`` is brought up to date (the caller
    keeps the result only once the post succeeded)."""
    held = {} if held is None else held
    out = []
    for a in alerts:
        fp, before = a.fingerprint, held.get(a.fingerprint)
        if a.state is AlertState.FIRING:
            now_detail = detail(a)
            if before is not None and before != now_detail:
                out.append(_postable(a, now, resend_interval, before, replaced_by=now_detail))
            out.append(_postable(a, now, resend_interval, now_detail))
            held[fp] = now_detail
        else:
            out.append(_postable(a, now, resend_interval, held.pop(fp, "") or detail(a)))
    return out


async def post_json(client: httpx.AsyncClient, url: str, body: Any) -> None:
    """POST ``body``; any transport error or non-2xx status is a :class:`DeliveryError` naming the
    receiver as :func:`~poolwatch.addresses.shown_url` shows it.  A 2xx answer's body is never
    read; a refusal's at most :data:`MAX_ANSWER_BYTES` (its first line, up to 200 characters, is
    quoted)."""
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.is_success:
                return
            status, excerpt = response.status_code, await _excerpt(response)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"{type(exc).__name__}: {scrub_urls(str(exc))}") from None
    raise DeliveryError(f"HTTP {status} from {shown_url(url)}: {excerpt}")


async def _excerpt(response: httpx.Response) -> str:
    """The first line of at most :data:`MAX_ANSWER_BYTES` of the answer (the rest is never read)."""
    head = bytearray()
    if response.is_stream_consumed:  # an answer built whole (a test's fake transport)
        head += response.content[:MAX_ANSWER_BYTES]
    else:  # raw bytes: a compressed body is never inflated
        async for chunk in response.aiter_raw():
            head += chunk[: MAX_ANSWER_BYTES - len(head)]
            if len(head) >= MAX_ANSWER_BYTES:
                break
    text = head.decode("utf-8", "replace").strip().splitlines()
    return scrub_urls(text[0][:200]) if text else ""


class AlertmanagerReceiver:
    def __init__(self, base_url: str, resend_interval: float) -> None:
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self.name = "alertmanager:" + shown_host(base_url)
        self.resends = True  # Alertmanager deduplicates: firing alerts are re-sent so it never forgets
        self._resend = resend_interval
        self._held: dict[str, str] = {}  # fingerprint -> the detail Alertmanager holds it firing under

    async def send(self, client: httpx.AsyncClient, alerts: Sequence[Alert], now: float) -> None:
        held = dict(self._held)
        await post_json(client, self.url, postable_alerts(alerts, now, self._resend, held))
        self._held = held

"""Delivery of alerts: Alertmanager API v2 and a generic JSON webhook, with re-send, retries and
backoff (:mod:`poolwatch.notify.delivery`), sharing one authenticated HTTP client."""

from __future__ import annotations

from poolwatch.notify.alertmanager import AlertmanagerReceiver
from poolwatch.notify.delivery import Deliverer, DeliveryStats, Outbox, Receiver
from poolwatch.notify.webhook import WebhookReceiver

__all__ = ["AlertmanagerReceiver", "Deliverer", "DeliveryStats", "Outbox", "Receiver", "WebhookReceiver"]

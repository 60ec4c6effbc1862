"""Delivery of alerts: Alertmanager API v2 and a generic JSON webhook, with re-send, retries and
backoff (:mod:`poolwatch.notify.delivery`), sharing one authenticated HTTP client."""

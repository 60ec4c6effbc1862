"""The kill switch and the reserved slots take a proof of the node's secret, not the secret: a
signature names the probe's own address, one route, a fresh clock and a nonce used once (issue 24
item 1)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from poolwatch.discovery.auth import MAX_SKEW_S, sign_request
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import Request
from poolwatch.probe.endpoint.routes import Context, answer

SECRET = "ab" * 32


@dataclass
class Switch:
    publication: Publication = field(default_factory=Publication)
    disabled: bool = False
    census: dict[str, Any] | None = None

    def disable(self) -> None:
        self.disabled = True

    def enable(self) -> None:
        self.disabled = False


def context(probe: Switch) -> Context:
    return Context(probe, probe.publication, 4000, SECRET, threading.Semaphore(3))


def post(ctx: Context, authorization: str, path: str = "/v1/disable") -> int:
    headers = {"host": "127.0.0.1:4000", "authorization": authorization}
    return answer(Request("POST", path, "", headers, False, "127.0.0.1"), ctx).status


def test_a_signature_switches_the_probe_off_once() -> None:
    probe = Switch()
    ctx = context(probe)
    signed = sign_request(SECRET, "POST", "127.0.0.1:4000", "/v1/disable", time.time())
    assert SECRET not in signed
    assert post(ctx, signed) == 200
    assert probe.disabled
    probe.enable()
    assert post(ctx, signed) == 403
    assert not probe.disabled


def test_a_signature_for_another_address_route_time_or_key_is_refused() -> None:
    probe = Switch()
    ctx = context(probe)
    now = time.time()
    refused = [
        sign_request(SECRET, "POST", "127.0.0.1:4001", "/v1/disable", now),  # a listener elsewhere
        sign_request(SECRET, "POST", "[::1]:4000", "/v1/disable", now),  # the same port, IPv6
        sign_request(SECRET, "GET", "127.0.0.1:4000", "/v1/snapshot", now),  # what the sidecar sends
        sign_request(SECRET, "POST", "127.0.0.1:4000", "/v1/disable", now - MAX_SKEW_S - 5),  # stale
        sign_request(SECRET, "POST", "127.0.0.1:4000", "/v1/disable", now + MAX_SKEW_S + 5),  # future
        sign_request("cd" * 32, "POST", "127.0.0.1:4000", "/v1/disable", now),  # another key
        "Poolwatch-HMAC ts=1e300 nonce=x mac=y",
    ]
    assert [post(ctx, header) for header in refused] == [403] * len(refused)
    assert not probe.disabled


def test_the_bearer_secret_still_works_for_an_operator() -> None:
    probe = Switch()
    assert post(context(probe), f"Bearer {SECRET}") == 200
    assert probe.disabled

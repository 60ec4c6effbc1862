"""What the probe's endpoint answers: one parsed request head in, one bounded response out.

No sockets here (:mod:`poolwatch.probe.endpoint.server` owns them), and no HTTP framing
(:mod:`poolwatch.probe.endpoint.messages` parses the head, at most ``MAX_HEAD_BYTES``, and encodes
the response).  Every input is bounded before it is used: ``wait`` is a finite number clamped to
``[0, MAX_WAIT_S]`` (``nan``, ``inf`` and words are a 400), a long-poll needs one of a few
slots, which the server takes before a thread answers (:func:`long_poll`; none free: 503 at
once), and the mutating endpoints answer only a loopback client that names the probe's own
address in ``Host``, sends no ``Origin`` (no browser page), and shows the secret from the
discovery directory: signed (``Authorization: Poolwatch-HMAC ...``, :mod:`poolwatch.discovery.auth`,
what the sidecar sends: the secret itself never goes over the wire) or shown as
``Authorization: Bearer <secret>`` (an operator's ``curl``).

A snapshot answer carries the ``ETag`` of its content; a client that sends it back
(``?have=<tag>``) and whose content is still the latest gets a bodiless ``304`` with the new
clock instead (see :mod:`poolwatch.codec.renewal`).
"""

from __future__ import annotations

import hmac
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs

from poolwatch.codec.renewal import CLOCK_HEADER, HAVE, NOT_MODIFIED, clock_header, content_tag
from poolwatch.codec.snapshot import dump_snapshot
from poolwatch.discovery.auth import Verifier
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.publication import Publication
from poolwatch.probe.endpoint.messages import BadRequest, Request, Response

__all__ = ["MAX_WAIT_S", "Context", "Servable", "answer", "authorized", "long_poll", "wait_of"]

MAX_WAIT_S = 30.0


class Servable(Protocol):
    publication: Publication

    @property
    def census(self) -> dict[str, Any] | None: ...

    @property
    def disabled(self) -> bool: ...

    def disable(self) -> None: ...

    def enable(self) -> None: ...


@dataclass
class Context:
    """What the routes need: the probe, its publication, its own port, the secret, the slots."""

    probe: Servable
    publication: Publication
    port: int
    secret: str | None
    long_polls: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(3))
    authority: str = ""  # "127.0.0.1:<port>": what a signature must name (default: from ``port``)
    verifier: Verifier | None = None
    _encoded: tuple[object, str, bytes] = (None, "", b"")  # (snapshot, content tag, body)

    def __post_init__(self) -> None:
        self.authority = self.authority or f"127.0.0.1:{self.port}"
        if self.secret is not None and self.verifier is None:
            self.verifier = Verifier(self.secret, self.authority)

    def encoded(self, snap: Snapshot) -> tuple[str, bytes]:
        """``(content tag, JSON body)`` of ``snap``, computed once however many clients ask."""
        cached, tag, body = self._encoded
        if cached is not snap:
            doc = dump_snapshot(snap)
            tag, body = content_tag(doc), json.dumps(doc).encode()
            self._encoded = (snap, tag, body)  # one tuple swap: a racing thread at worst encodes twice
        return tag, body

    def snapshot_body(self, snap: Snapshot) -> bytes:
        """The JSON of ``snap``, encoded once however many clients ask for it."""
        return self.encoded(snap)[1]


def wait_of(query: str) -> tuple[str, float]:
    """``(sig, wait)`` from a snapshot query; ``wait`` finite and clamped to ``[0, MAX_WAIT_S]``."""
    params = parse_qs(query, max_num_fields=8)
    raw = params.get("wait", ["0"])[0]
    try:
        wait = float(raw)
    except ValueError:
        raise BadRequest("wait must be a number of seconds") from None
    if not math.isfinite(wait):
        raise BadRequest("wait must be a finite number of seconds")
    return params.get("sig", [""])[0][:512], min(max(wait, 0.0), MAX_WAIT_S)


def answer(req: Request, ctx: Context) -> Response:
    """The response to one request (never raises for any input it was given)."""
    if not _host_ok(req, ctx.port):
        return Response(403, {"error": "unexpected Host header"}, close=True)
    if "transfer-encoding" in req.headers or req.headers.get("content-length", "0").strip() not in ("", "0"):
        return Response(413, {"error": "requests carry no body"}, close=True)
    if req.method == "GET":
        try:
            return _get(req, ctx)
        except BadRequest as exc:
            return Response(400, {"error": str(exc)})
    if req.method == "POST" and req.path in ("/v1/disable", "/v1/enable"):
        return _mutate(req, ctx)
    return Response(405 if req.path in ("/v1/snapshot", "/v1/census", "/healthz") else 404,
                    {"error": f"no such endpoint {req.method} {req.path[:100]!r}"})  # fmt: skip


def _host_ok(req: Request, port: int) -> bool:
    host = req.headers.get("host")
    if host is None:
        return req.method == "GET"  # HTTP/1.0 tools; never for a change
    return host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}")


def _get(req: Request, ctx: Context) -> Response:
    if req.path == "/v1/snapshot":
        return _snapshot(req, ctx)
    if req.path == "/v1/census":
        census = ctx.probe.census
        return Response(200, census) if census is not None else Response(404, {"error": "no census yet"})
    if req.path == "/healthz":
        return Response(200, {"ok": True, "disabled": ctx.probe.disabled})
    return Response(404, {"error": f"no such path {req.path[:100]!r}"})


def long_poll(req: Request) -> bool:
    """Whether ``req`` would wait (the server takes a long-poll slot for it before a thread does)."""
    if req.method != "GET" or req.path != "/v1/snapshot":
        return False
    try:
        return wait_of(req.query)[1] > 0
    except BadRequest:
        return False


def _snapshot(req: Request, ctx: Context) -> Response:
    """The latest snapshot; with ``wait`` > 0 (the caller holds a long-poll slot), once it changes;
    only its clock (a bodiless 304) when its content is the one the caller has (``have``)."""
    seen, wait = wait_of(req.query)
    snap = ctx.publication.latest if wait <= 0 else ctx.publication.wait_changed(seen, wait)
    if snap is None:
        return Response(503, {"error": "no snapshot yet"})
    tag, body = ctx.encoded(snap)
    ctx.publication.served(snap)  # the last word waits for this (core/last_word.py)
    if HAVE in req.query and tag == _have(req.query):
        return Response(NOT_MODIFIED, b"", headers=((CLOCK_HEADER, clock_header(snap)), ("ETag", f'"{tag}"')))
    return Response(200, body, headers=(("ETag", f'"{tag}"'),))


def _have(query: str) -> str:
    """The content tag the client holds (``""``: none)."""
    return parse_qs(query, max_num_fields=8).get(HAVE, [""])[0][:64]


def authorized(req: Request, ctx: Context) -> bool:
    """Whether a loopback ``req`` proves the node's secret: a fresh :mod:`~poolwatch.discovery.auth`
    signature of this request for this endpoint, or the secret itself (``Authorization: Bearer``)."""
    if ctx.secret is None or not (req.peer.startswith("127.") or req.peer == "::1"):
        return False
    shown = req.headers.get("authorization", "")
    if shown.startswith("Poolwatch-HMAC ") and ctx.verifier is not None:
        return ctx.verifier.verify(shown, req.method, req.path, time.time())
    bearer = shown.removeprefix("Bearer ").strip()
    return hmac.compare_digest(bearer.encode("latin-1"), ctx.secret.encode("latin-1"))


def _mutate(req: Request, ctx: Context) -> Response:
    if not req.peer.startswith("127.") and req.peer != "::1":
        return Response(403, {"error": "only from the loopback"}, close=True)
    if "origin" in req.headers or "sec-fetch-mode" in req.headers:
        return Response(403, {"error": "not from a browser"}, close=True)
    if not (req.trusted or authorized(req, ctx)):
        return Response(403, {"error": "Authorization: a Poolwatch-HMAC signature, or Bearer <secret>"})
    ctx.probe.disable() if req.path == "/v1/disable" else ctx.probe.enable()
    return Response(200, {"disabled": ctx.probe.disabled})

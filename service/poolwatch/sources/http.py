"""One bounded HTTP GET, with every failure mapped to a bounded :class:`~poolwatch.errors.Reason`.

A body whose declared length passes ``max_bytes`` is refused before it is read; one without a
declared length is streamed and the request aborted as soon as it passes ``max_bytes`` (a target
that answers with gigabytes costs us ``max_bytes``, not the gigabytes).  ``url`` may be a parsed
``httpx.URL``: a caller that asks the same URL again saves parsing it each time.  The overall deadline is
the scrape loop's; httpx's own timeouts come from the client.  :func:`get_answer` also hands back
the status and headers (a probe's ``ETag``, or its bodiless ``304``: see :mod:`poolwatch.codec.renewal`).
A failure names the URL as :func:`~poolwatch.addresses.shown_url` shows it (no user, password,
path or query: a probe's signature and content tag stay out of every message).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from poolwatch.addresses import shown_url
from poolwatch.errors import Reason, ScrapeError
from poolwatch.sources.failures import scrape_failure
from poolwatch.sources.wire import Answer, Headers, WireClient

__all__ = ["decode_json", "get_answer", "get_bytes", "get_json", "join_url"]


def _shown(url: str | httpx.URL) -> str:
    return shown_url(str(url))


def join_url(base: str, path: str) -> str:
    """``base`` (with or without a trailing slash) + ``path``."""
    return base.rstrip("/") + "/" + path.lstrip("/")


async def get_bytes(client: httpx.AsyncClient, url: str | httpx.URL, max_bytes: int) -> bytes:
    """The body of a 2xx answer; raises ``ScrapeError`` (timeout, connect, http_status, too_large).
    A watch lane's plain-HTTP GET skips httpx (see :mod:`poolwatch.sources.wire`)."""
    return (await get_answer(client, url, max_bytes))[2]


async def get_answer(
    client: httpx.AsyncClient,
    url: str | httpx.URL,
    max_bytes: int,
    expect: frozenset[int] = frozenset(),
    extra: Headers = (),
) -> Answer:
    """``(status, headers, body)`` of a 2xx answer, or of one whose status is in ``expect`` (its
    body not read); fails like :func:`get_bytes`.  Header names are lower-case; ``extra`` headers
    are sent with the request (never named in an error: they may hold a secret)."""
    if isinstance(client, WireClient) and client.handles(url):
        return await client.answer(url, max_bytes, expect, extra)
    try:
        async with client.stream("GET", url, headers=dict(extra)) as response:
            status, headers = response.status_code, {k.lower(): v for k, v in response.headers.items()}
            if status in expect and not response.is_success:
                return status, headers, b""
            if not response.is_success:
                raise ScrapeError(Reason.HTTP_STATUS, f"GET {_shown(url)}: HTTP {status}")
            return status, headers, await _read_body(response, url, max_bytes)
    except httpx.HTTPError as exc:
        raise scrape_failure(exc, f"GET {_shown(url)}") from None


async def _read_body(response: httpx.Response, url: str | httpx.URL, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit():
        if int(declared) > max_bytes:
            raise ScrapeError(Reason.TOO_LARGE, f"GET {_shown(url)}: body of {declared} bytes > {max_bytes}")
        if "content-encoding" not in response.headers:  # a compressed body may grow
            return await response.aread()  # the framing holds it to the declared length
    return await _read_capped(response, url, max_bytes)


async def _read_capped(response: httpx.Response, url: str | httpx.URL, max_bytes: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise ScrapeError(Reason.TOO_LARGE, f"GET {_shown(url)}: body larger than {max_bytes} bytes")
    return bytes(body)


async def get_json(client: httpx.AsyncClient, url: str | httpx.URL, max_bytes: int) -> Any:
    """The decoded JSON body; a body that is not UTF-8 JSON is a ``PayloadError`` (decode)."""
    return decode_json(await get_bytes(client, url, max_bytes), url)


def decode_json(body: bytes, url: str | httpx.URL) -> Any:
    """``body`` decoded as UTF-8 JSON; anything else is a ``PayloadError`` (decode)."""
    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, absurdly nested
        raise scrape_failure(exc, f"GET {_shown(url)}") from None

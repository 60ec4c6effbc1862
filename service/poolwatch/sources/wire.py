"""A watch lane's fast path: plain-HTTP GETs over one kept-alive asyncio stream, without httpx.

A watched probe is asked once per interval, forever, over one kept-alive connection, for a small
JSON body with a ``Content-Length``.  Through httpx each such GET costs ~0.5 ms of CPU (request
and response models, the connection pool's bookkeeping, anyio); written straight to an asyncio
stream it costs ~30 us.  At 1,000 watched probes that is most of a core; for a per-pod sidecar
watching 8 ranks, half of what it spends.

:class:`WireClient` *is* an ``httpx.AsyncClient`` (a lane: see :mod:`poolwatch.sidecar.lanes`);
:func:`poolwatch.sources.http.get_bytes` sends its ``http://`` GETs through :meth:`WireClient.fetch`
and everything else (``https://``) through httpx.  The wire speaks only what it needs: one
request at a time, ``Content-Length`` or chunked bodies (or a body up to the close), the same
bounded failures as the httpx path (connect, http_status with ``HTTP <code>`` in the message,
too_large; the scrape loop's deadline is the timeout).  :meth:`WireClient.answer` also hands back
the status and headers of a 2xx, or of a status the caller expects (a bodiless ``304``).  A
kept-alive connection the server closed while idle is reopened once; a GET interrupted half-way
(a deadline) drops the connection.  Proxy settings from the environment are not consulted: a
lane talks to one probe directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import httpx

from poolwatch.addresses import scrub_urls, shown_url
from poolwatch.errors import Reason, ScrapeError

__all__ = ["Answer", "Headers", "WireClient"]

Answer = tuple[int, dict[str, str], bytes]  # (status, {lower-case header name: value}, body)
Headers = tuple[tuple[str, str], ...]  # extra request headers, (name, value)
_BODILESS = frozenset({204, 304})
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9%._~&=+-]*")
_STALE = (ConnectionError, asyncio.IncompleteReadError)  # a reused connection the server closed


class WireClient(httpx.AsyncClient):
    """An httpx client whose plain-HTTP GETs go over one kept-alive stream of its own."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._origin: tuple[str, int] = ("", 0)
        self._request: tuple[str, tuple[str, int], bytes] = ("", ("", 0), b"")  # (url, origin, bytes)
        self._base: tuple[str, httpx.URL | None] = ("", None)  # the URL before its query, parsed

    @staticmethod
    def handles(url: str | httpx.URL) -> bool:
        """Whether :meth:`fetch` serves ``url`` (plain HTTP); else the caller uses httpx."""
        return str(url).startswith("http://")

    async def fetch(self, url: str | httpx.URL, max_bytes: int) -> bytes:
        """The body of a 2xx answer to ``GET url``; raises ``ScrapeError`` like the httpx path."""
        return (await self.answer(url, max_bytes))[2]

    async def answer(
        self,
        url: str | httpx.URL,
        max_bytes: int,
        expect: frozenset[int] = frozenset(),
        headers: Headers = (),
    ) -> Answer:
        """A 2xx answer to ``GET url`` (``headers`` sent too), or one whose status is in ``expect``;
        any other status raises ``ScrapeError`` (http_status), as do the httpx path's other failures."""
        key = str(url)
        built = f"{key} {headers}" if headers else key  # never in a message: headers may hold a secret
        if self._request[0] != built:  # built once per URL (a watch's URL changes with its signature)
            self._request = (built, *_request_of(*self._parsed(key), headers))
        _, origin, request = self._request
        reused = self._stream is not None and self._origin == origin
        try:
            try:
                return await self._exchange(origin, request, key, max_bytes, expect)
            except _STALE:
                if not reused:
                    raise
                self._drop()  # closed by the server while idle: once more on a new connection
                return await self._exchange(origin, request, key, max_bytes, expect)
        except ScrapeError:
            raise
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            self._drop()
            raise ScrapeError(
                Reason.CONNECT, f"GET {shown_url(key)}: {type(exc).__name__}: {scrub_urls(str(exc))}"
            ) from None
        except BaseException:  # cancelled half-way (the deadline): the stream's state is unknown
            self._drop()
            raise

    async def _exchange(
        self, origin: tuple[str, int], request: bytes, url: str, max_bytes: int, expect: frozenset[int]
    ) -> Answer:
        if self._stream is None or self._origin != origin:
            self._drop()
            self._stream, self._origin = await asyncio.open_connection(*origin), origin
        reader, writer = self._stream
        writer.write(request)
        status, headers = _head(await reader.readuntil(b"\r\n\r\n"))
        bodiless = status in _BODILESS
        body = b"" if bodiless else await self._body(reader, headers, url, max_bytes)
        framed = bodiless or "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")
        if not framed or headers.get("connection", "").lower() == "close":
            self._drop()
        if not 200 <= status < 300 and status not in expect:
            raise ScrapeError(Reason.HTTP_STATUS, f"GET {shown_url(url)}: HTTP {status}")
        return status, headers, body

    async def _body(
        self, reader: asyncio.StreamReader, headers: dict[str, str], url: str, max_bytes: int
    ) -> bytes:
        declared = headers.get("content-length", "")
        if declared.isdigit():
            if int(declared) > max_bytes:
                self._drop()
                shown = shown_url(url)
                raise ScrapeError(Reason.TOO_LARGE, f"GET {shown}: body of {declared} bytes > {max_bytes}")
            return await reader.readexactly(int(declared))
        body = bytearray()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        while chunk := (await _chunk(reader) if chunked else await reader.read(65536)):
            body += chunk
            if len(body) > max_bytes:
                self._drop()
                shown = shown_url(url)
                raise ScrapeError(Reason.TOO_LARGE, f"GET {shown}: body larger than {max_bytes} bytes")
        return bytes(body)

    def _parsed(self, key: str) -> tuple[httpx.URL, str]:
        """``(URL, query)`` of ``key``: the part before a plain query (letters, digits,
        ``%``-escapes and ``-._~&=+``, as a watch's signature and tag are sent) parsed once per
        base, since a watch's query changes with every new signature or held content; any other
        URL parsed whole (its query in the URL)."""
        base, _, query = key.partition("?")
        if not _PLAIN_QUERY.fullmatch(query):
            return httpx.URL(key), ""
        parsed = self._base[1]
        if self._base[0] != base or parsed is None:
            parsed = httpx.URL(base)
            self._base = (base, parsed)
        return parsed, query

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
        self._stream = None

    async def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream[1].close()
            with contextlib.suppress(Exception):
                await stream[1].wait_closed()

    async def aclose(self) -> None:
        await self._close_stream()
        await super().aclose()

    async def __aexit__(self, *exc_info: Any) -> None:  # httpx's does not call aclose
        await self._close_stream()
        await super().__aexit__(*exc_info)


def _request_of(url: httpx.URL, query: str = "", headers: Headers = ()) -> tuple[tuple[str, int], bytes]:
    host, port = url.host, url.port or 80
    netloc = url.netloc.decode("ascii")
    path = url.raw_path.decode("ascii") + (f"?{query}" if query else "")
    head = f"GET {path} HTTP/1.1\r\nHost: {netloc}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (host, port), (head + "Accept: application/json\r\nUser-Agent: poolwatch\r\n\r\n").encode("ascii")


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    """``(status, {lower-case name: value})`` of a response head; ``ValueError`` if malformed."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked body (``b""`` at its end, trailers consumed)."""
    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
    if size == 0:
        while await reader.readuntil(b"\r\n") != b"\r\n":
            pass
        return b""
    data = await reader.readexactly(size)
    await reader.readexactly(2)
    return data

"""The watch lane's fast path: GETs over one kept-alive stream, failures named like the httpx path's."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import pytest

from poolwatch.errors import Reason, ScrapeError
from poolwatch.sources.http import get_json
from poolwatch.sources.wire import WireClient

Answer = Callable[[int], bytes]  # request number -> the raw response


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), head.encode()) + body


class Server:
    """A loopback HTTP/1.1 server that counts connections and requests."""

    def __init__(self, answer: Answer, close_after_each: bool = False) -> None:
        self.answer, self.close_after_each = answer, close_after_each
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""
        self.handlers: list[asyncio.Task[object]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                writer.write(self.answer(len(self.requests)))
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., object]]:
    servers: list[tuple[asyncio.Server, Server]] = []

    async def start(answer: Answer, close_after_each: bool = False) -> Server:
        server = Server(answer, close_after_each)
        listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        servers.append((listening, server))
        server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1/snapshot?sig=a%7Cb&wait=1"
        return server

    yield start
    for listening, server in servers:  # the clients are closed: every handler sees the end
        listening.close()
        await asyncio.wait_for(asyncio.gather(*server.handlers), 5)


async def test_gets_go_over_one_kept_alive_connection_with_the_query_as_given(serve) -> None:
    server = await serve(lambda n: ok(json.dumps({"n": n}).encode()))
    async with WireClient() as client:
        answers = [await get_json(client, server.url, 1 << 20) for _ in range(3)]
    assert answers == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /v1/snapshot?sig=a%7Cb&wait=1 HTTP/1.1\r\nHost: 127.0.0.1:")


async def test_a_watch_whose_query_changes_sends_each_query_as_given_and_quotes_an_odd_one(serve) -> None:
    server = await serve(lambda n: ok(b"{}"))
    base = server.url.partition("?")[0]
    queries = ["sig=a%7Cb&wait=1&have=0f1e", "sig=a%7Cb&wait=1&have=2d3c", "sig=a b|c"]
    async with WireClient() as client:
        for query in queries:
            await client.fetch(f"{base}?{query}", 1 << 20)
    lines = [r.split(b"\r\n", 1)[0] for r in server.requests]
    assert lines == [
        b"GET /v1/snapshot?sig=a%7Cb&wait=1&have=0f1e HTTP/1.1",
        b"GET /v1/snapshot?sig=a%7Cb&wait=1&have=2d3c HTTP/1.1",
        b"GET /v1/snapshot?sig=a%20b|c HTTP/1.1",  # not a plain query: parsed and quoted whole, as httpx does
    ]
    assert server.connections == 1


async def test_an_error_status_names_its_code_and_the_connection_stays_usable(serve) -> None:
    busy = b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\n{}"
    server = await serve(lambda n: busy if n == 1 else ok(b"[1]"))
    async with WireClient() as client:
        with pytest.raises(ScrapeError) as failed:
            await client.fetch(server.url, 1 << 20)
        assert failed.value.reason is Reason.HTTP_STATUS
        assert "HTTP 503" in str(failed.value)
        assert await client.fetch(server.url, 1 << 20) == b"[1]"
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_reopened_once(serve) -> None:
    server = await serve(lambda n: ok(b"{}"), close_after_each=True)
    async with WireClient() as client:
        for _ in range(3):
            assert await client.fetch(server.url, 1 << 20) == b"{}"
    assert server.connections == 3


async def test_a_declared_body_over_the_cap_is_refused_unread(serve) -> None:
    server = await serve(lambda n: ok(b"x" * 100))
    async with WireClient() as client:
        with pytest.raises(ScrapeError) as failed:
            await client.fetch(server.url, 10)
    assert failed.value.reason is Reason.TOO_LARGE


async def test_a_chunked_body_is_read_whole_and_capped(serve) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n"
    server = await serve(lambda n: chunked)
    async with WireClient() as client:
        assert await get_json(client, server.url, 1 << 20) == [1, 2]
        with pytest.raises(ScrapeError) as failed:
            await client.fetch(server.url, 4)
    assert failed.value.reason is Reason.TOO_LARGE


async def test_nothing_listening_is_a_connect_failure(serve) -> None:
    server = await serve(lambda n: ok(b"{}"))
    url = server.url
    async with WireClient() as client:
        listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        listening.close()
        await listening.wait_closed()
        with pytest.raises(ScrapeError) as failed:
            await client.fetch(f"http://127.0.0.1:{port}/v1/snapshot", 1 << 20)
        assert failed.value.reason is Reason.CONNECT
        assert await client.fetch(url, 1 << 20) == b"{}"  # another origin: a connection of its own


async def test_a_garbled_answer_is_a_connect_failure_and_drops_the_connection(serve) -> None:
    server = await serve(lambda n: b"SPAM\r\n\r\n" if n == 1 else ok(b"{}"))
    async with WireClient() as client:
        with pytest.raises(ScrapeError) as failed:
            await client.fetch(server.url, 1 << 20)
        assert failed.value.reason is Reason.CONNECT
        assert await client.fetch(server.url, 1 << 20) == b"{}"
    assert server.connections == 2

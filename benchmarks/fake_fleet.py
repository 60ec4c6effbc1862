"""A fake fleet of probe endpoints for the fleet benchmark: one asyncio process on 127.0.0.1.

Every rank is a path prefix (``/rank<N>/v1/snapshot``) on one of a few ports.  It answers like a
probe whose verdict does not change: a request without ``sig`` at once, a long-poll (``sig`` and
``wait``) after ``wait`` seconds, each time with a fresh ``taken_at`` and the next ``seq``.
HTTP/1.1 keep-alive.  The snapshot template comes on stdin; the ports go to stdout, one line.

``MODE`` says what kind of probes they are:

* ``steady`` (default): a current probe whose figures do not move -- each answer carries the
  ``ETag`` of its content, and a request that names it (``have``) gets a bodiless 304 with the
  new clock (:mod:`poolwatch.codec.renewal`);
* ``old``: an older probe -- no ETag, always the whole body;
* ``busy``: a current probe whose figures move with every sample (a queue depth changes), so
  every answer is a whole body with a new ETag.

Run: ``python benchmarks/fake_fleet.py PORTS LIFETIME_S [MODE] < snapshot.json``; the benchmark
kills it when done, and it exits by itself after ``LIFETIME_S`` (default 600) in any case.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from urllib.parse import parse_qs

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
UNCHANGED = b"HTTP/1.1 304 Not Modified\r\nPoolwatch-Clock: seq=%d taken_at=%.6f\r\n%s\r\n"
MAX_WAIT_S = 30.0


class Fleet:
    def __init__(self, template: bytes, mode: str) -> None:
        self._template = template
        self._mode = mode
        self._seq = 48211
        self._tags: dict[bytes, bytes] = {}

    def body(self, rank: bytes) -> bytes:
        body = self._template.replace(b'"tp_rank": 0', b'"tp_rank": ' + rank, 1)
        if self._mode == "busy":  # the figures move: a new queue depth in every answer
            body = body.replace(b'"queues": {', b'"queues": {"bench": %d, ' % (self._seq % 97), 1)
        body = body.replace(b'"seq": 48211', b'"seq": %d' % self._seq, 1)
        return body.replace(b'"taken_at": 0.0', b'"taken_at": %.6f' % time.time(), 1)

    def answer(self, rank: bytes, have: str) -> bytes:
        self._seq += 1
        if self._mode == "old":
            body = self.body(rank)
            return HEAD % (len(body), b"") + body
        tag = self._tags.get(rank) if self._mode == "steady" else None
        if tag is not None and have == tag.decode():
            return UNCHANGED % (self._seq, time.time(), b'ETag: "%s"\r\n' % tag)
        body = self.body(rank)
        tag = b"busy-%d" % self._seq  # every answer is new content
        if self._mode == "steady":
            tag = self._tags[rank] = self._tag(body)
        return HEAD % (len(body), b'ETag: "%s"\r\n' % tag) + body

    @staticmethod
    def _tag(body: bytes) -> bytes:
        from poolwatch.codec.renewal import content_tag

        return content_tag(json.loads(body)).encode()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                target = request.split(b" ", 2)[1].decode()
                path, _, query = target.partition("?")
                params = parse_qs(query)
                if params.get("sig", [""])[0]:
                    await asyncio.sleep(min(float(params.get("wait", ["0"])[0]), MAX_WAIT_S))
                rank = path.split("/")[1].removeprefix("rank").encode()
                writer.write(self.answer(rank, params.get("have", [""])[0]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        writer.close()


async def main(ports: int, lifetime: float, mode: str) -> None:
    fleet = Fleet(sys.stdin.buffer.read(), mode)
    servers = [await asyncio.start_server(fleet.serve, "127.0.0.1", 0, backlog=4096) for _ in range(ports)]
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(s.serve_forever() for s in servers)), lifetime)


if __name__ == "__main__":
    args = sys.argv[1:] + ["1", "600", "steady"][len(sys.argv) - 1 :]
    asyncio.run(main(int(args[0]), float(args[1]), args[2]))

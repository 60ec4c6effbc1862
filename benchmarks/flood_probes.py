"""Probes that push the largest snapshots the sidecar accepts, as fast as it asks: the memory
benchmark's load (``bench_memory_flood.py``).  One asyncio process on 127.0.0.1.

Every rank is a path prefix (``/rank<N>/v1/snapshot``) on one port.  Each answer is a whole, new,
schema-valid snapshot just under the sidecar's body limit (``POOLWATCH_MAX_BODY_BYTES``, 4 MiB):
``TRIPWIRES`` tripwires, each naming ``IDS`` distinct slot ids and 8 requests, every one a new
finding (its iteration is the answer's), so nothing the sidecar keeps can be shared with the last
answer; a long-poll is answered at once (no ETag, so never a 304).  HTTP/1.1 keep-alive.

Run: ``python benchmarks/flood_probes.py RANKS LIFETIME_S``; prints ``<port> <body bytes>`` on one
line, exits after ``LIFETIME_S`` (the benchmark kills it sooner).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
MAX_BODY = 4 << 20  # the sidecar's default max_body_bytes
TRIPWIRES = 128
IDS = 4000
SEQ_MARK = b"987654321"  # stands for the answer's number (fixed width: the length never changes)


def template(rank: int) -> bytes:
    """One rank's largest valid snapshot, with ``SEQ_MARK`` where each answer puts its number."""
    wires = [
        {
            "kind": "free_duplicate" if n % 2 else "missing",
            "pool": "mamba" if n % 2 else "full",
            "slots": list(range(100_000 + n * IDS, 100_000 + (n + 1) * IDS)),
            "first_seen_hook": "process_prefill_chunk",
            "seq": int(SEQ_MARK),
            "requests": [f"req-{rank}-{n}-{r}-" + "r" * 40 for r in range(8)],
        }
        for n in range(TRIPWIRES)
    ]
    doc = {
        "schema": "poolwatch.snapshot",
        "version": 1,
        "worker": {"worker": "flood", "role": "decode", "tp_rank": rank, "release": "0.5.9"},
        "seq": int(SEQ_MARK),
        "taken_at": 1.0e9,
        "phase": "busy",
        "source": "probe",
        "boot_id": f"flood-{rank}",
        "pools": {
            "full": {"pool": "full", "exactness": "exact", "size": 10_000_000, "available": 9_000_000,
                     "evictable": 500_000, "protected": 0, "held": 500_000},
            "mamba": {"pool": "mamba", "exactness": "exact", "size": 4096, "available": 4000,
                      "evictable": 0, "protected": 0, "held": 96},
        },
        "queues": {"waiting": 3, "running": 64},
        "tripwires": wires,
    }  # fmt: skip
    body = json.dumps(doc, separators=(",", ":")).encode()
    assert len(body) < MAX_BODY, len(body)
    return body


class Flood:
    def __init__(self, ranks: int) -> None:
        self._bodies = [template(r) for r in range(ranks)]
        self._seq = 100_000_000

    def answer(self, rank: int) -> bytes:
        self._seq += 1
        number = b"%09d" % self._seq
        body = self._bodies[rank].replace(SEQ_MARK, number)
        now = b"%.3f" % time.time()
        body = body.replace(b'"taken_at":1000000000.0', b'"taken_at":' + now, 1)
        return HEAD % len(body) + body

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                rank = int(path.split(b"/")[1].removeprefix(b"rank"))
                writer.write(self.answer(rank))
                await writer.drain()
        writer.close()


async def main(ranks: int, lifetime: float) -> None:
    flood = Flood(ranks)
    server = await asyncio.start_server(flood.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(port, len(flood.answer(0)), flush=True)
    await asyncio.sleep(lifetime)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 900.0))

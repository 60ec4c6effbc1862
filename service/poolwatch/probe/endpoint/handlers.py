"""The probe endpoint's handler threads, and which complete request may take one.

:data:`WORKERS` threads answer the requests the I/O thread (:mod:`poolwatch.probe.endpoint.server`) read
whole.  At most :data:`PUBLIC_LONG_POLLS` of them wait on a long-poll for anyone (a condition the
publication notifies, no polling) and :data:`RESERVED_LONG_POLLS` more only for a client that
shows the secret of the discovery directory (``Authorization: Bearer``, as the sidecar does), so
local clients that hold every public slot never starve the sidecar; one worker is always left for
``/healthz`` and the kill switch.  Whether a request may take a thread is decided in the I/O
thread before any is woken, so a refusal (a 503 at once) costs no thread.

Cost: each answer is one :func:`~poolwatch.probe.endpoint.routes.answer` and one blocking send (at most
:data:`SEND_TIMEOUT_S`); the scheduler thread is never touched.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from poolwatch.probe.endpoint.conn import Conn
from poolwatch.probe.endpoint.messages import Request, Response
from poolwatch.probe.endpoint.routes import Context, answer, long_poll

__all__ = ["PUBLIC_LONG_POLLS", "RESERVED_LONG_POLLS", "SEND_TIMEOUT_S", "WORKERS", "Handlers"]

PUBLIC_LONG_POLLS = 3
RESERVED_LONG_POLLS = 1  # for clients that show the secret (the sidecar)
WORKERS = PUBLIC_LONG_POLLS + RESERVED_LONG_POLLS + 1  # one always left for short requests
SEND_TIMEOUT_S = 5.0
_BUSY = tuple(Response(503, {"error": "busy; retry"}).encode(k) for k in (False, True))
_POLLS_FULL = tuple(Response(503, {"error": "too many long-polls; retry"}).encode(k) for k in (False, True))

Job = tuple[Conn, Request, threading.Semaphore | None]


class Handlers:
    """The handler threads of one endpoint; ``done(conn, keep)`` hands each connection back to
    the I/O thread once answered (``keep``: it stays open for the client's next request)."""

    def __init__(self, ctx: Context, done: Callable[[Conn, bool], None]) -> None:
        self._ctx, self._done = ctx, done
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._free_workers = threading.Semaphore(WORKERS)
        self._reserved_polls = threading.Semaphore(RESERVED_LONG_POLLS)
        self.threads = [
            threading.Thread(target=self._work, name=f"poolwatch-probe-http-{i}", daemon=True)
            for i in range(WORKERS)
        ]

    def submit(self, conn: Conn, req: Request, *, trusted: bool) -> tuple[bytes, ...] | None:
        """Hand ``req`` to a free thread; else the 503 answers (without, with keep-alive) to send
        instead.  ``trusted``: the client showed the secret."""
        polls = long_poll(req)
        slot = self._poll_slot(trusted) if polls else None  # decided here: a refusal costs no thread
        if polls and slot is None:
            return _POLLS_FULL
        if self._free_workers.acquire(blocking=False):
            self._jobs.put((conn, req, slot))
            return None
        if slot is not None:
            slot.release()
        return _BUSY

    def stop(self) -> None:
        """Ask every thread to end once its current answer is sent."""
        for _ in range(WORKERS):
            self._jobs.put(None)

    def _poll_slot(self, trusted: bool) -> threading.Semaphore | None:
        """The long-poll slot taken (None: none is free): a client that showed the secret takes a
        reserved one first, then a public one; anyone else only a public one."""
        for pool in (self._reserved_polls, self._ctx.long_polls) if trusted else (self._ctx.long_polls,):
            if pool.acquire(blocking=False):
                return pool
        return None

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            conn, req, slot = job
            keep = False
            try:
                conn.sock.settimeout(SEND_TIMEOUT_S)
                response = answer(req, self._ctx)
                conn.sock.sendall(response.encode(req.keep_alive))
                keep = req.keep_alive and not response.close
                conn.sock.setblocking(False)
            except Exception:  # a client gone mid-answer, or a bug: close this one, keep serving
                keep = False
            finally:
                self._free_workers.release()
                if slot is not None:
                    slot.release()
            self._done(conn, keep)

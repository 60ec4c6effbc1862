"""The probe's loopback HTTP/1.1 endpoint: a few fixed threads that cannot slow the scheduler.

=====================  ========================================================================
``GET /v1/snapshot``   the latest snapshot (``poolwatch.snapshot`` JSON); 503 before the first.
                       ``?sig=S&wait=W`` long-polls: the answer comes as soon as the latest
                       snapshot's :func:`~poolwatch.conservation.signature` differs from ``S``
                       (a pool's balance changed, a tripwire appeared), else after ``W`` seconds
                       (finite, clamped to 0..30), so an alert reaches the sidecar within one sample.
``GET /v1/census``     the last census detail (``poolwatch.census`` JSON); 404 before the first
``GET /healthz``       ``{"ok": true, "disabled": ...}``
``POST /v1/disable``   the runtime kill switch (``/v1/enable`` undoes); loopback, own ``Host``, no
                       ``Origin``, ``Authorization: Bearer <secret>`` (``discovery.read_secret``)
=====================  ========================================================================

How it stays out of the scheduler's way (the scheduler thread only calls
:meth:`~poolwatch.probe.publication.Publication.publish`):

* one **I/O thread** owns the listening socket and every connection *between* requests
  (``selectors``): it reads request heads with a deadline (:data:`HEAD_TIMEOUT_S` once a head has
  begun, :data:`IDLE_TIMEOUT_S` for a silent keep-alive connection), holds at most
  :data:`MAX_OPEN` connections (one more gets a 503 and is closed), and paces itself to
  :data:`RATE` requests a second -- a flood waits in the kernel's backlog instead of taking the
  interpreter lock from the scheduler;
* :data:`WORKERS` **handler threads** answer complete heads; at most :data:`PUBLIC_LONG_POLLS`
  of them wait on a long-poll for anyone (a condition the publication notifies, no polling) and
  :data:`RESERVED_LONG_POLLS` more only for a client that shows the secret of the discovery
  directory (``Authorization: Bearer``, as the sidecar does), so local clients that hold every
  public slot never starve the sidecar; one worker is always left for ``/healthz`` and the kill
  switch; a head that arrives while every worker is busy gets a 503 at once;
* past :data:`MAX_OPEN` connections, :data:`RESERVED_OPEN` more are accepted whose first request
  must show the secret within :data:`RESERVED_HEAD_TIMEOUT_S` (else a 503 and closed), so a
  sidecar can still (re)connect while idle local clients hold every public connection;
* connections are HTTP/1.1 keep-alive, so a watching sidecar reuses one TCP connection.
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import threading
import time

from poolwatch.probe.conn import Conn, Pacer, send_and_close, try_send
from poolwatch.probe.routes import (
    MAX_HEAD_BYTES,
    BadRequest,
    Context,
    Request,
    Response,
    Servable,
    answer,
    authorized,
    long_poll,
    parse_head,
)

__all__ = [
    "HEAD_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "MAX_OPEN",
    "PUBLIC_LONG_POLLS",
    "RATE",
    "RESERVED_LONG_POLLS",
    "RESERVED_OPEN",
    "WORKERS",
    "ProbeServer",
    "Servable",
]

PUBLIC_LONG_POLLS = 3
RESERVED_LONG_POLLS = 1  # for clients that show the secret (the sidecar)
WORKERS = PUBLIC_LONG_POLLS + RESERVED_LONG_POLLS + 1  # one always left for short requests
MAX_OPEN = 32
RESERVED_OPEN = 4  # connections past MAX_OPEN, for clients that show the secret
HEAD_TIMEOUT_S = 5.0
RESERVED_HEAD_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 15.0
SEND_TIMEOUT_S = 5.0
RATE = 100.0  # requests (and accepted connections) per second; a burst of RATE / 4
_FULL = Response(503, {"error": "too many connections; retry"}, close=True).encode(False)
_BUSY = tuple(Response(503, {"error": "busy; retry"}).encode(k) for k in (False, True))
_POLLS_FULL = tuple(Response(503, {"error": "too many long-polls; retry"}).encode(k) for k in (False, True))


class ProbeServer:
    """Serve ``probe`` (and its ``publication``) on ``host:port`` (0 = any free port)."""

    def __init__(self, probe: Servable, port: int = 0, host: str = "127.0.0.1", *, secret: str | None = None):
        self._listen = socket.create_server((host, port), backlog=64)
        self._listen.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._conns: dict[socket.socket, Conn] = {}  # waiting for a head (I/O thread only)
        self._open = 0  # registered + with a worker (I/O thread only)
        self._jobs: queue.SimpleQueue[tuple[Conn, Request, threading.Semaphore | None] | None]
        self._jobs = queue.SimpleQueue()
        self._back: queue.SimpleQueue[tuple[Conn, bool]] = queue.SimpleQueue()
        self._free_workers = threading.Semaphore(WORKERS)
        public_polls = threading.Semaphore(PUBLIC_LONG_POLLS)
        self._ctx = Context(probe, probe.publication, self.port, secret, public_polls)
        self._reserved_polls = threading.Semaphore(RESERVED_LONG_POLLS)
        self._pacer = Pacer(RATE)
        self._stopping = False
        self._threads = [threading.Thread(target=self._io_loop, name="poolwatch-probe-io", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"poolwatch-probe-http-{i}", daemon=True)
            for i in range(WORKERS)
        ]

    @property
    def port(self) -> int:
        return int(self._listen.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self._listen.getsockname()[0]}:{self.port}"

    def start(self) -> str:
        self._sel.register(self._listen, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        for thread in self._threads:
            thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting, wake every long-poll, and end every thread (within ~1 s)."""
        self._stopping = True
        self._ctx.publication.close()
        self._wake()
        for _ in range(WORKERS):
            self._jobs.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        for sock in (self._listen, self._wake_r, self._wake_w):
            sock.close()
        while True:  # connections handed back after the I/O thread ended
            try:
                self._back.get_nowait()[0].sock.close()
            except queue.Empty:
                break

    # -- the I/O thread ---------------------------------------------------------------------

    def _io_loop(self) -> None:
        while not self._stopping:
            try:
                self._io_round()
            except Exception:  # a bug here must not end serving; the next round starts clean
                time.sleep(0.05)
        for conn in list(self._conns.values()):
            self._close(conn)
        self._sel.close()

    def _io_round(self) -> None:
        now = time.monotonic()
        deadline = min((c.deadline for c in self._conns.values()), default=now + 1.0)
        for key, _ in self._sel.select(timeout=min(max(deadline - now, 0.0), 1.0)):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                self._drain_wake()
            else:
                self._read(key.data)
        self._take_back()
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self._close(conn)

    def _accept(self) -> None:
        self._pacer.take()
        try:
            sock, addr = self._listen.accept()
        except OSError:
            return
        reserved = self._open >= MAX_OPEN
        if self._open >= MAX_OPEN + RESERVED_OPEN:
            send_and_close(sock, _FULL)
            return
        sock.setblocking(False)
        self._open += 1
        timeout = RESERVED_HEAD_TIMEOUT_S if reserved else HEAD_TIMEOUT_S
        self._watch(Conn(sock, str(addr[0]), time.monotonic() + timeout, started=True, reserved=reserved))

    def _watch(self, conn: Conn) -> None:
        self._conns[conn.sock] = conn
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        if b"\r\n\r\n" in conn.buf:  # a pipelined request arrived with the previous one
            self._dispatch(conn)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        if not conn.started:
            conn.started, conn.deadline = True, time.monotonic() + HEAD_TIMEOUT_S
        conn.buf += data
        self._dispatch(conn)

    def _dispatch(self, conn: Conn) -> None:
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.buf) > MAX_HEAD_BYTES:
                self._refuse(conn, Response(400, {"error": "request head too large"}, close=True))
            return
        head = bytes(conn.buf[:end])
        del conn.buf[: end + 4]
        self._pacer.take()
        try:
            req = parse_head(head, conn.peer)
        except BadRequest as exc:
            self._refuse(conn, Response(400, {"error": str(exc)}, close=True))
            return
        self._unwatch(conn)
        trusted = authorized(req, self._ctx.secret)
        if conn.reserved and not trusted:
            self._refuse(conn, Response(503, {"error": "too many connections; retry"}, close=True))
            return
        conn.reserved = False  # shown once: the connection is the sidecar's
        polls = long_poll(req)
        slot = self._poll_slot(trusted) if polls else None  # decided here: a refusal costs no thread
        if polls and slot is None:
            self._busy(conn, req, _POLLS_FULL)
        elif self._free_workers.acquire(blocking=False):
            self._jobs.put((conn, req, slot))
        else:
            if slot is not None:
                slot.release()
            self._busy(conn, req, _BUSY)

    def _poll_slot(self, trusted: bool) -> threading.Semaphore | None:
        """The long-poll slot taken (None: none is free): a client that showed the secret takes a
        reserved one first, then a public one; anyone else only a public one."""
        for pool in (self._reserved_polls, self._ctx.long_polls) if trusted else (self._ctx.long_polls,):
            if pool.acquire(blocking=False):
                return pool
        return None

    def _busy(self, conn: Conn, req: Request, answers: tuple[bytes, ...]) -> None:
        """A 503 from the I/O thread itself; a keep-alive client may ask again (paced)."""
        sent = try_send(conn.sock, answers[req.keep_alive])
        self._back.put((conn, sent and req.keep_alive))

    def _refuse(self, conn: Conn, response: Response) -> None:
        try_send(conn.sock, response.encode(False))
        self._close(conn)

    def _unwatch(self, conn: Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            self._sel.unregister(conn.sock)

    def _close(self, conn: Conn) -> None:
        self._unwatch(conn)
        conn.sock.close()
        self._open -= 1

    def _take_back(self) -> None:
        while True:
            try:
                conn, keep = self._back.get_nowait()
            except queue.Empty:
                return
            if keep and not self._stopping:
                conn.started, conn.deadline = False, time.monotonic() + IDLE_TIMEOUT_S
                self._watch(conn)
            else:
                conn.sock.close()
                self._open -= 1

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except OSError:
            pass

    # -- handler threads --------------------------------------------------------------------

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
            self._back.put((conn, keep))
            self._wake()

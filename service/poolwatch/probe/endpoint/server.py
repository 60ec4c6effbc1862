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
                       ``Origin``, the node's secret proven (``discovery.auth``) or shown
=====================  ========================================================================

How it stays out of the scheduler's way (the scheduler thread only calls
:meth:`~poolwatch.probe.core.publication.Publication.publish`):

* one **I/O thread** owns the listening socket and every connection *between* requests
  (``selectors``): it reads request heads with a deadline (:data:`HEAD_TIMEOUT_S` once a head has
  begun, :data:`IDLE_TIMEOUT_S` for a silent keep-alive connection), holds at most
  :data:`MAX_OPEN` connections (one more gets a 503 and is closed), and paces itself to
  :data:`RATE` requests a second -- a flood waits in the kernel's backlog instead of taking the
  interpreter lock from the scheduler;
* a few **handler threads** (:mod:`poolwatch.probe.endpoint.handlers`) answer complete heads, with
  :data:`PUBLIC_LONG_POLLS` long-poll slots for anyone and more only for a client that shows the
  secret of the discovery directory (the sidecar), and one thread always left for ``/healthz`` and
  the kill switch; a head that arrives while every worker is busy gets a 503 at once;
* past :data:`MAX_OPEN` connections, :data:`RESERVED_OPEN` more whose first request must show the
  secret within :data:`RESERVED_HEAD_TIMEOUT_S`; past those, a connection whose first request shows
  it takes the place of one that never did (:class:`~poolwatch.probe.endpoint.conn.Admission`), so
  a neighbour that holds every connection and re-opens the reserved ones as fast as they close
  cannot keep a restarting sidecar out (its pen of waiting connections bounds how fast such a
  neighbour's connections go round, within the same :data:`RATE`);
* connections are HTTP/1.1 keep-alive, so a watching sidecar reuses one TCP connection.

Kept whole: the I/O thread's loop -- accept, read, dispatch, hand back, take back -- is one state
machine over one selector and the connections it owns; what stands alone is apart already
(``conn.py``, ``handlers.py``, ``routes.py``, ``messages.py``).
"""

from __future__ import annotations

import queue
import selectors
import socket
import threading
import time
from dataclasses import replace

from poolwatch.probe.endpoint.conn import Admission, Conn, Pacer, Waker, try_send
from poolwatch.probe.endpoint.handlers import PUBLIC_LONG_POLLS, Handlers
from poolwatch.probe.endpoint.messages import MAX_HEAD_BYTES, BadRequest, Request, Response, parse_head
from poolwatch.probe.endpoint.routes import Context, Servable, authorized

__all__ = [
    "HEAD_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "MAX_OPEN",
    "RATE",
    "RESERVED_OPEN",
    "ProbeServer",
]

MAX_OPEN = 32
RESERVED_OPEN = 4  # connections past MAX_OPEN, for clients that show the secret
HEAD_TIMEOUT_S = 5.0
RESERVED_HEAD_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 15.0
RATE = 100.0  # requests (and accepted connections) per second; a burst of RATE / 4
_FULL = Response(503, {"error": "too many connections; retry"}, close=True).encode(False)


class ProbeServer:
    """Serve ``probe`` (and its ``publication``) on ``host:port`` (0 = any free port)."""

    def __init__(
        self,
        probe: Servable,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        secret: str | None = None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ):
        self._head_timeout_s = head_timeout_s
        self._listen = socket.create_server((host, port), backlog=64)
        self._listen.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._waker = Waker()
        self._conns: dict[socket.socket, Conn] = {}  # waiting for a head (I/O thread only)
        self._back: queue.SimpleQueue[tuple[Conn, bool]] = queue.SimpleQueue()
        public_polls = threading.Semaphore(PUBLIC_LONG_POLLS)
        authority = self.url.removeprefix("http://")  # what a signed request must name
        self._ctx = Context(probe, probe.publication, self.port, secret, public_polls, authority)
        self._handlers = Handlers(self._ctx, self._hand_back)
        self._pacer = Pacer(RATE)
        self._places = Admission(MAX_OPEN, RESERVED_OPEN, RESERVED_HEAD_TIMEOUT_S)
        self._stopping = False
        io = threading.Thread(target=self._io_loop, name="poolwatch-probe-io", daemon=True)
        self._threads = [io, *self._handlers.threads]

    @property
    def port(self) -> int:
        return int(self._listen.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self._listen.getsockname()[0]}:{self.port}"

    def start(self) -> str:
        self._sel.register(self._listen, selectors.EVENT_READ, "listen")
        self._sel.register(self._waker.r, selectors.EVENT_READ, "wake")
        for thread in self._threads:
            thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting, wake every long-poll, and end every thread (within ~1 s)."""
        self._stopping = True
        self._ctx.publication.close()
        self._waker.wake()
        self._handlers.stop()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        for sock in (self._listen, self._waker.r, self._waker.w):
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
                self._waker.drain()
            else:
                self._read(key.data)
        self._take_back()
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            if conn.penned:  # past every place and the secret not shown in time
                try_send(conn.sock, _FULL)
            self._close(conn)

    def _accept(self) -> None:
        self._pacer.take()
        try:
            sock, addr = self._listen.accept()
        except OSError:
            return
        sock.setblocking(False)
        now = time.monotonic()
        conn = Conn(sock, str(addr[0]), now, started=True, since=now)
        self._places.place(conn, now, self._head_timeout_s)
        self._watch(conn)
        self._listening()

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
            conn.started, conn.deadline = True, time.monotonic() + self._head_timeout_s
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
        trusted = authorized(req, self._ctx)
        req = replace(req, trusted=trusted) if trusted else req
        if (conn.reserved or conn.penned) and not (trusted and self._place_for(conn)):
            self._refuse(conn, Response(503, {"error": "too many connections; retry"}, close=True))
            return
        conn.reserved, conn.proven = False, conn.proven or trusted  # shown once: the sidecar's
        refusal = self._handlers.submit(conn, req, trusted=trusted)  # a refusal costs no thread
        if refusal is not None:
            self._busy(conn, req, refusal)

    def _busy(self, conn: Conn, req: Request, answers: tuple[bytes, ...]) -> None:
        """A 503 from the I/O thread itself; a keep-alive client may ask again (paced)."""
        sent = try_send(conn.sock, answers[req.keep_alive])
        self._back.put((conn, sent and req.keep_alive))

    def _refuse(self, conn: Conn, response: Response) -> None:
        try_send(conn.sock, response.encode(False))
        self._close(conn)

    def _place_for(self, conn: Conn) -> bool:
        """A place for ``conn``, which showed the secret: its own, or, from the pen, the place of a
        connection that never did (shed with a 503); False when none may be shed."""
        victim = Admission.victim(self._conns.values()) if conn.penned else None
        if conn.penned and victim is None:
            return False
        if victim is not None:
            try_send(victim.sock, _FULL)
            self._close(victim)
            self._places.seat(conn)
            self._listening()
        return True

    def _unwatch(self, conn: Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            self._sel.unregister(conn.sock)

    def _close(self, conn: Conn) -> None:
        self._unwatch(conn)
        conn.sock.close()
        self._places.vacate(conn)
        self._listening()

    def _listening(self) -> None:
        """Watch the listening socket while a new connection can be placed (not while the pen is
        full: it waits in the kernel's backlog, and ``select`` does not spin on it)."""
        watched = self._listen in self._sel.get_map()
        if self._places.accepting != watched and not self._stopping:
            if watched:
                self._sel.unregister(self._listen)
            else:
                self._sel.register(self._listen, selectors.EVENT_READ, "listen")

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
                self._places.vacate(conn)

    def _hand_back(self, conn: Conn, keep: bool) -> None:
        """From a handler thread: an answered connection goes back to the I/O thread."""
        self._back.put((conn, keep))
        self._waker.wake()

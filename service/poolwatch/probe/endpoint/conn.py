"""Small pieces of the probe endpoint's I/O thread: one connection's state, who gets a place when
every place is taken (:class:`Admission`), a token bucket that paces the thread, the socket pair
that wakes it, and sends that never block it.  Stdlib only; no scheduler access."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["ADMIT_GRACE_S", "PEN_SIZE", "Admission", "Conn", "Pacer", "Waker", "send_and_close", "try_send"]

ADMIT_GRACE_S = 0.25  # how long a connection past every place may take to show the secret
PEN_SIZE = 32  # such connections waiting at once; while it is full, no more are accepted


@dataclass(eq=False)
class Conn:
    """A client connection between requests: its unread bytes and the deadline for a head."""

    sock: socket.socket
    peer: str
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    started: bool = False  # a head has begun (its deadline is the head timeout, not the idle one)
    reserved: bool = False  # taken past the public limit: its first request must show the secret
    penned: bool = False  # past every place: admitted only if its first request shows the secret
    proven: bool = False  # a request on it showed the secret: it is never shed
    since: float = 0.0  # when it was accepted (the oldest idle connection is shed first)


class Admission:
    """The connections' places: ``max_open`` public ones, ``reserved`` more whose first request
    must show the secret within ``reserved_timeout``, and past them all a small pen (at most
    :data:`PEN_SIZE`, :data:`ADMIT_GRACE_S` each) where a new connection waits for its first
    request: one that shows the secret takes the place of a connection that never did (an idle
    public one first, the oldest; then a reserved one; then one still sending its head), so a
    neighbour holding and re-opening every place cannot keep the sidecar out; any other gets a 503.
    A connection that showed the secret is never shed.  (The I/O thread's alone: no lock.)"""

    def __init__(self, max_open: int, reserved: int, reserved_timeout: float) -> None:
        self.max_open, self.reserved, self.reserved_timeout = max_open, reserved, reserved_timeout
        self.taken = 0  # places taken: connections waiting for a head, or with a handler
        self.pen: list[Conn] = []

    @property
    def accepting(self) -> bool:
        """Whether a new connection can be given a place or a spot in the pen."""
        return len(self.pen) < PEN_SIZE

    def place(self, conn: Conn, now: float, head_timeout: float) -> None:
        """Give a new connection a place, or a spot in the pen (only while :attr:`accepting`)."""
        if self.taken >= self.max_open + self.reserved:
            conn.penned, conn.deadline = True, now + ADMIT_GRACE_S
            self.pen.append(conn)
            return
        conn.reserved = self.taken >= self.max_open
        conn.deadline = now + (self.reserved_timeout if conn.reserved else head_timeout)
        self.taken += 1

    def vacate(self, conn: Conn) -> None:
        """``conn`` is closed: its place (or its spot in the pen) is free."""
        if conn.penned:
            self.pen.remove(conn)
            conn.penned = False
        else:
            self.taken -= 1

    @staticmethod
    def victim(waiting: Iterable[Conn]) -> Conn | None:
        """The connection to shed for one that showed the secret (``None``: none may be shed)."""
        sheddable = [c for c in waiting if not (c.proven or c.penned)]
        return min(sheddable, key=lambda c: (bool(c.buf), c.reserved, c.since), default=None)

    def seat(self, conn: Conn) -> None:
        """A penned connection that showed the secret takes the place just shed for it."""
        self.pen.remove(conn)
        conn.penned = False
        self.taken += 1


class Pacer:
    """At most ``rate`` takes a second (bursts of ``rate / 4``): when none is left, :meth:`take`
    sleeps until one is due, so a flood waits in the kernel's backlog, not on the interpreter lock."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens, self._refilled = rate / 4, time.monotonic()

    def take(self) -> None:
        now = time.monotonic()
        self._tokens = min(self._rate / 4, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens < 1.0:
            time.sleep((1.0 - self._tokens) / self._rate)
            self._tokens = 1.0
        self._tokens -= 1.0


class Waker:
    """A socket pair that wakes the I/O thread's ``select`` from another thread."""

    def __init__(self) -> None:
        self.r, self.w = socket.socketpair()
        self.r.setblocking(False)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self.w.send(b"x")

    def drain(self) -> None:
        try:
            while self.r.recv(512):
                pass
        except OSError:
            pass


def try_send(sock: socket.socket, data: bytes) -> bool:
    """Send a short answer without blocking; False when it did not go out whole."""
    try:
        return sock.send(data) == len(data)
    except OSError:
        return False


def send_and_close(sock: socket.socket, data: bytes) -> None:
    sock.setblocking(False)
    try_send(sock, data)
    sock.close()

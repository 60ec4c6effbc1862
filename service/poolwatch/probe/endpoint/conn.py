"""Small pieces of the probe endpoint's I/O thread: one connection's state, a token bucket that
paces the thread, the socket pair that wakes it, and sends that never block it.  Stdlib only; no
scheduler access."""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass, field

__all__ = ["Conn", "Pacer", "Waker", "send_and_close", "try_send"]


@dataclass(eq=False)
class Conn:
    """A client connection between requests: its unread bytes and the deadline for a head."""

    sock: socket.socket
    peer: str
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    started: bool = False  # a head has begun (its deadline is the head timeout, not the idle one)
    reserved: bool = False  # taken past the public limit: its first request must show the secret


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

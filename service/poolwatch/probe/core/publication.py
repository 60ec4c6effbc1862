"""The probe's one published snapshot, and the condition long-polls wait on.

The scheduler thread calls :meth:`Publication.publish` whenever it has a new snapshot (a sample,
a tripwire, a health change); that swaps one reference and wakes every waiter -- O(waiters) lock
releases, never I/O, never a wait of its own beyond an uncontended lock (waiters hold the lock only
to read two fields: signatures are computed outside it).  The HTTP threads call
:meth:`Publication.wait_changed`, which blocks on the condition (no polling loop) until the
latest snapshot's :func:`~poolwatch.conservation.signature` differs from the one the client saw,
or the timeout passes.

Interface for other probe code (e.g. a tripwire that must reach the sidecar at once)::

    publication.publish(snapshot)                 # scheduler thread; never raises, never blocks long
    publication.wait_changed(seen_signature, t)   # HTTP thread: Snapshot | None after <= t seconds
    publication.latest                            # lock-free read of the current reference
    publication.served(snapshot)                  # HTTP thread: a client was handed this snapshot
    publication.wait_served(seq, t)               # scheduler thread: True once seq >= ``seq`` was served
    publication.close()                           # wake and release every waiter (server stop)

Time is injected (``clock``, and ``wait``: how a waiter blocks on the held condition), so tests
drive a long-poll's timeout and an early answer on a fake clock without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from poolwatch.conservation import signature
from poolwatch.model.snapshot import Snapshot

__all__ = ["Publication", "Wait"]

# block on the (held) condition for at most the given seconds; returns when notified or timed out
Wait = Callable[[threading.Condition, float], object]


def _condition_wait(cond: threading.Condition, timeout: float) -> object:
    return cond.wait(timeout)


class Publication:
    """One reference the scheduler thread swaps, plus a condition variable to wait for a change."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wait: Wait = _condition_wait) -> None:
        self._clock, self._wait = clock, wait
        self._cond = threading.Condition(threading.Lock())
        self._snapshot: Snapshot | None = None
        self._version = 0
        self._closed = False
        self._waiting = 0
        self._signed: tuple[int, str] = (-1, "")  # (version, signature): computed once per publish
        # the furthest a client was handed (the last word's "collected"): (seq, version), the version
        # counted only when the snapshot handed over was the latest (a mid-step republication of the
        # same seq, vLLM's free-time finding, is collected only once that one was handed over)
        self._served: tuple[int, int] = (-1, 0)
        self._served_at = -float("inf")  # clock() of the last hand-over

    @property
    def latest(self) -> Snapshot | None:
        return self._snapshot

    @property
    def version(self) -> int:
        """How many times something was published (a waiter's cheap "anything new?")."""
        return self._version

    @property
    def waiting(self) -> int:
        """How many long-polls are blocked on the condition right now."""
        return self._waiting

    def publish(self, snapshot: Snapshot | None) -> None:
        """Make ``snapshot`` the latest and wake every long-poll (scheduler thread)."""
        with self._cond:
            self._snapshot = snapshot
            self._version += 1
            self._cond.notify_all()

    def served(self, snapshot: Snapshot) -> None:
        """A client was handed ``snapshot`` (HTTP thread, just before the send): wakes a scheduler
        thread waiting in :meth:`wait_served`."""
        with self._cond:
            mark = (snapshot.seq, self._version if snapshot is self._snapshot else 0)
            self._served = max(self._served, mark)
            self._served_at = self._clock()
            self._cond.notify_all()

    def attended(self, within: float) -> bool:
        """Whether someone collects: a long-poll is blocked now, or a snapshot was handed over in
        the last ``within`` seconds (a sidecar that polls; a dead one stops counting)."""
        return self._waiting > 0 or self._clock() - self._served_at <= within

    def wait_served(self, seq: int, timeout: float, version: int = 0) -> bool:
        """Block until a client was handed a snapshot of ``seq`` or later (True) -- with ``version``,
        of ``seq`` as published at that version or later --, at most ``timeout`` seconds (False),
        or the publication closes (False)."""
        deadline = self._clock() + max(0.0, timeout)
        with self._cond:
            while self._served < (seq, version):
                remaining = deadline - self._clock()
                if remaining <= 0 or self._closed:
                    return False
                self._wait(self._cond, remaining)
            return True

    def close(self) -> None:
        """Wake every waiter for good: they answer with what they have (server shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def signature(self) -> str:
        """The latest snapshot's signature ("" before the first), computed at most once per publish."""
        with self._cond:
            version, snap = self._version, self._snapshot
        return self._signature_of(version, snap)

    def _signature_of(self, version: int, snap: Snapshot | None) -> str:
        cached_version, cached = self._signed
        if cached_version == version:
            return cached
        sig = "" if snap is None else signature(snap)
        self._signed = (version, sig)  # one tuple swap: readers never see half of it
        return sig

    def wait_changed(self, seen_signature: str, timeout: float) -> Snapshot | None:
        """The latest snapshot as soon as its signature differs from ``seen_signature``, else
        whatever is latest after ``timeout`` seconds (clamped to ``>= 0``)."""
        deadline = self._clock() + max(0.0, timeout)
        while True:
            with self._cond:
                version, snap, closed = self._version, self._snapshot, self._closed
            if snap is not None and self._signature_of(version, snap) != seen_signature:
                return snap
            remaining = deadline - self._clock()
            if remaining <= 0 or closed:
                return snap
            with self._cond:
                if self._version == version and not self._closed:
                    self._waiting += 1
                    try:
                        self._wait(self._cond, remaining)
                    finally:
                        self._waiting -= 1

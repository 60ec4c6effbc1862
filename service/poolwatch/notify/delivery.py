"""Reliable delivery of the detector's alerts to one receiver (Alertmanager, a webhook).

The :class:`Deliverer` runs the outbox against the receiver on a tick, and at once when
:meth:`Deliverer.wake` is called (the sidecar calls it the moment a new alert fires, so a page
does not wait for the tick); its clock and sleep are injected, and tests drive
:meth:`Deliverer.deliver_once` directly.
What is due, re-sent, updated, gathered into one incident or dropped is the outbox's
(:mod:`poolwatch.notify.outbox`).

Each attempt has a total ``deadline`` (connect, send, the answer's head and what is read of its
body, all together: an HTTP client's timeouts are per read, so a receiver that answers one byte
every few seconds would hold it for ever); an attempt past it is a failure like any other, and
backs off.  Every receiver has its own deliverer (its own task), so a slow receiver delays only
itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from poolwatch.detect.alert import Alert
from poolwatch.errors import DeliveryError
from poolwatch.notify.outbox import Outbox

__all__ = ["DeliveryStats", "Deliverer", "Receiver"]

log = logging.getLogger("poolwatch.notify")


class Receiver(Protocol):
    """Where alerts go.  ``send`` raises :class:`~poolwatch.errors.DeliveryError` on any failure."""

    name: str
    resends: bool  # deduplicates, so firing alerts are re-sent (Alertmanager); else each state once

    async def send(self, client: httpx.AsyncClient, alerts: Sequence[Alert], now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class DeliveryStats:
    receiver: str
    counts: Mapping[str, int]  # alerts sent, failed (per attempt) and dropped
    queued: int  # alerts waiting to be delivered in their current state


class Deliverer:
    """One receiver's delivery loop."""

    def __init__(
        self,
        receiver: Receiver,
        client: httpx.AsyncClient,
        source: Callable[[], Sequence[Alert]],
        clock: Callable[[], float],
        *,
        resend_interval: float = 60.0,
        capacity: int = 1000,
        tick: float = 1.0,
        gather: float = 0.0,
        peers: Callable[[Alert], int] | None = None,
        backoff: tuple[float, float] = (1.0, 60.0),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        deadline: float = 10.0,
    ) -> None:
        self.receiver = receiver
        self._client = client
        self._source = source
        self._clock = clock
        self._tick = tick
        self._sleep = sleep
        self._deadline = deadline
        resend = getattr(receiver, "resends", True)
        self.outbox = Outbox(
            resend_interval,
            capacity,
            backoff_min=backoff[0],
            backoff_max=backoff[1],
            resend=resend,
            gather=gather,
            since=clock(),
            peers=peers,
        )
        self._counts = {"sent": 0, "failed": 0, "dropped": 0}
        self._up = True
        self._woken = asyncio.Event()

    async def deliver_once(self) -> int:
        """Bring the outbox up to date and send what is due; returns how many alerts went out."""
        now = self._clock()
        self.outbox.update(self._source(), now)
        batch = self.outbox.due(now)
        if not batch:
            return 0
        try:
            async with asyncio.timeout(self._deadline):
                await self.receiver.send(self._client, batch, now)
        except TimeoutError:
            return self._failed(batch, f"no complete answer within {self._deadline:g} s")
        except DeliveryError as exc:
            return self._failed(batch, str(exc))
        self.outbox.delivered(batch, self._clock())
        self._counts["sent"] += len(batch)
        if not self._up:
            log.info("delivery recovered receiver=%s", self.receiver.name)
        self._up = True
        return len(batch)

    def _failed(self, batch: Sequence[Alert], error: str) -> int:
        self._counts["failed"] += len(batch)
        delay = self.outbox.failed(self._clock())
        if self._up:
            name = self.receiver.name
            log.warning("delivery failed receiver=%s error=%s retry_in=%.0fs", name, error, delay)
        self._up = False
        return 0

    def wake(self) -> None:
        """Deliver now instead of at the next tick (call it from the event loop's thread)."""
        self._woken.set()

    async def run(self) -> None:
        while True:
            self._woken.clear()
            await self.deliver_once()
            await self._pause()

    async def _pause(self) -> None:
        """The tick (shorter while newly firing alerts gather), cut short by :meth:`wake` (a
        back-off still holds: ``due`` is empty then)."""
        if self._woken.is_set():
            return
        pause, ready = self._tick, self.outbox.ready_at()
        if ready:
            pause = min(pause, max(0.0, ready - self._clock()))
        sleeper = asyncio.ensure_future(self._sleep(pause))
        waiter = asyncio.ensure_future(self._woken.wait())
        try:
            done, _ = await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()
        if sleeper in done:
            sleeper.result()  # an injected sleep that raises ends the loop, as before

    def stats(self) -> DeliveryStats:
        counts = {**self._counts, "dropped": self.outbox.dropped}
        return DeliveryStats(self.receiver.name, counts, self.outbox.queued)

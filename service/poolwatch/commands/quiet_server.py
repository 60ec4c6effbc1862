"""uvicorn's server, woken once a second instead of ten times, and at once by a signal.

uvicorn's ``Server.main_loop`` sleeps 0.1 s between ticks only to notice ``should_exit`` (set by
its SIGTERM/SIGINT handler) and to refresh the ``date`` header once a second.  For a sidecar
beside every worker, those ten wake-ups a second are a third of its event loop's wake-ups when it
watches 8 ranks (each wake-up of an idle process costs a few hundred microseconds of CPU on a
shared VM: a cold cache and an ``epoll_wait`` round trip).  :class:`QuietServer` ticks once a
second (each tick refreshes the header, as uvicorn's every tenth tick does) and its exit handler
cuts the current wait short, so SIGTERM is acted on at once, not up to a second later.

Only ``main_loop`` and ``handle_exit`` are replaced; ``on_tick`` and the shutdown path are
uvicorn's own.  ``tests/commands/test_quiet_server.py`` checks the installed uvicorn still has the
methods and tick arithmetic this relies on.
"""

from __future__ import annotations

import asyncio
from types import FrameType

import uvicorn

__all__ = ["TICK_S", "QuietServer"]

TICK_S = 1.0
_TICKS_PER_HEADER = 10  # uvicorn refreshes the date header when ``counter % 10 == 0``
_COUNTER_WRAP = 864_000  # uvicorn's own wrap of the tick counter


class QuietServer(uvicorn.Server):
    """A ``uvicorn.Server`` whose main loop wakes once a second (``tick_s``) or when asked to exit."""

    def __init__(self, config: uvicorn.Config, *, tick_s: float = TICK_S) -> None:
        super().__init__(config)
        self._tick_s = tick_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nap: asyncio.Future[None] | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _TICKS_PER_HEADER) % _COUNTER_WRAP  # every tick refreshes the header
            await self._doze(self._tick_s)
            should_exit = await self.on_tick(counter)

    async def _doze(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if an exit is asked for meanwhile."""
        assert self._loop is not None
        if self.should_exit:
            return
        nap = self._nap = self._loop.create_future()
        timer = self._loop.call_later(seconds, self._wake)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None

    def _wake(self) -> None:
        nap = self._nap
        if nap is not None and not nap.done():
            nap.set_result(None)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)  # a signal handler may run between any two bytecodes

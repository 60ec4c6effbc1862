"""The sidecar's uvicorn server wakes once a second, refreshes the date header at every wake-up,
and leaves its wait at once when told to exit (what ``poolwatch serve`` runs)."""

from __future__ import annotations

import asyncio
import signal

import uvicorn
from fastapi import FastAPI

from poolwatch.commands.quiet_server import QuietServer


def config() -> uvicorn.Config:
    return uvicorn.Config(FastAPI(), host="127.0.0.1", port=0, log_level="warning")


def server() -> QuietServer:
    return QuietServer(config())


class CountingServer(QuietServer):
    """Records the counter of every tick and asks to exit on the fourth."""

    def __init__(self, tick_s: float) -> None:
        super().__init__(config(), tick_s=tick_s)
        self.seen: list[int] = []

    async def on_tick(self, counter: int) -> bool:
        self.seen.append(counter)
        if len(self.seen) == 4:
            self.handle_exit(signal.SIGTERM, None)
        return await super().on_tick(counter)


def date_of(s: uvicorn.Server) -> list[bytes]:
    return [v for k, v in s.server_state.default_headers if k == b"date"]


def test_the_installed_uvicorn_refreshes_the_header_on_every_tenth_tick_only() -> None:
    """What the quiet loop relies on: ``on_tick(counter)`` refreshes at ``counter % 10 == 0``."""
    s = server()
    asyncio.run(s.on_tick(5))
    assert date_of(s) == []
    asyncio.run(s.on_tick(10))
    assert len(date_of(s)) == 1
    for name in ("main_loop", "on_tick", "handle_exit"):
        assert callable(getattr(uvicorn.Server, name))


def test_every_wake_up_refreshes_the_header_and_an_exit_ends_the_loop() -> None:
    s = CountingServer(tick_s=0.001)
    asyncio.run(asyncio.wait_for(s.main_loop(), timeout=30))
    assert s.seen == [0, 10, 20, 30]
    assert len(date_of(s)) == 1


def test_a_signal_cuts_the_wait_short() -> None:
    """With an hour between ticks, an exit asked for during the wait still ends the loop (the
    ``wait_for`` bound only stops a broken build from hanging the suite)."""

    async def scenario() -> None:
        s = CountingServer(tick_s=3600.0)
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, s.handle_exit, signal.SIGTERM, None)
        await asyncio.wait_for(s.main_loop(), timeout=30)
        assert s.should_exit
        assert s.seen == [0, 10]  # the first tick, and the one the exit woke

    asyncio.run(scenario())


def test_an_exit_before_the_loop_starts_ends_it_without_waiting() -> None:
    s = server()
    s.handle_exit(signal.SIGTERM, None)  # no loop yet: only the flag is set
    asyncio.run(asyncio.wait_for(s.main_loop(), timeout=30))
    assert s.should_exit

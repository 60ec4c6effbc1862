"""The sidecar's uvicorn server wakes once a second, refreshes the date header at every wake-up,
and leaves its wait at once when told to exit (what ``poolwatch serve`` runs)."""

from __future__ import annotations

import asyncio
import signal

import pytest
import uvicorn
from fastapi import FastAPI

from poolwatch.commands import quiet_server
from poolwatch.commands.quiet_server import QuietServer


def server() -> QuietServer:
    return QuietServer(uvicorn.Config(FastAPI(), host="127.0.0.1", port=0, log_level="warning"))


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


def test_every_wake_up_refreshes_the_header_and_an_exit_ends_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quiet_server, "TICK_S", 0.001)
    s = server()
    seen: list[int] = []
    real = s.on_tick

    async def on_tick(counter: int) -> bool:
        seen.append(counter)
        if len(seen) == 4:
            s.handle_exit(signal.SIGTERM, None)
        return await real(counter)

    monkeypatch.setattr(s, "on_tick", on_tick)
    asyncio.run(asyncio.wait_for(s.main_loop(), timeout=30))
    assert seen == [0, 10, 20, 30]
    assert len(date_of(s)) == 1


def test_a_signal_cuts_the_wait_short() -> None:
    """With an hour between ticks, an exit asked for during the wait still ends the loop (the
    ``wait_for`` bound only stops a broken build from hanging the suite)."""

    async def scenario() -> None:
        s = server()
        quiet_server.TICK_S, before = 3600.0, quiet_server.TICK_S
        try:
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, s.handle_exit, signal.SIGTERM, None)
            await asyncio.wait_for(s.main_loop(), timeout=30)
        finally:
            quiet_server.TICK_S = before
        assert s.should_exit

    asyncio.run(scenario())


def test_an_exit_before_the_loop_starts_ends_it_without_waiting() -> None:
    s = server()
    s.handle_exit(signal.SIGTERM, None)  # no loop yet: only the flag is set
    asyncio.run(asyncio.wait_for(s.main_loop(), timeout=30))
    assert s.should_exit

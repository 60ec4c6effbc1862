"""Fixtures of the source tests: a client for the protocol, and log sources closed when a test ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from poolwatch.model.rank import Role
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.source import LogSource


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:  # unused by a log source, required by the protocol
        yield c


@pytest.fixture
def log_source() -> Iterator[Callable[..., LogSource]]:
    """``log_source(dialect, path, clock, role, **options)``: the live log source of worker ``w0``
    reading ``path`` in ``dialect`` (``options``: :class:`LogSource`'s bounds), closed at the end."""
    made: list[LogSource] = []

    def make(
        dialect: LogDialect,
        path: Path,
        clock: Callable[[], float],
        role: Role = Role.UNIFIED,
        **options: int,
    ) -> LogSource:
        target = Target("log", dialect.source, str(path), "w0", role)
        made.append(LogSource(target, clock, dialect, **options))
        return made[-1]

    yield make
    for source in made:
        source.close()

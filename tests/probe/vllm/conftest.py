"""Fixtures every vLLM probe test may take."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from poolwatch.probe.lifecycle import detach


@pytest.fixture
def made() -> Iterator[list[Any]]:
    """Schedulers a test attached a probe to (detached when it ends)."""
    held: list[Any] = []
    yield held
    for sched in held:
        detach(sched)

"""Shared fixtures: the seed snapshot and a fake clock (helpers live in tests/helpers.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import settings

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.model import Snapshot
from tests.helpers import FIXTURES, FakeClock

# No per-example deadline: timing is the benchmarks' business, and on a shared CI box one slow
# example would fail a property that holds (hypothesis' default is 200 ms per example).
settings.register_profile("poolwatch", deadline=None)
settings.load_profile("poolwatch")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def seed_snapshot() -> Snapshot:
    """The seed incident (0.5.4.post1, PD prefill, idle): full balanced, Mamba surplus of 1."""
    return parse_snapshot(json.loads((FIXTURES / "seed-snapshot.json").read_text()))

"""Shared fixtures: the seed snapshot and a fake clock (helpers live in tests/helpers.py)."""

from __future__ import annotations

import json

import pytest

from poolwatch.codec import parse_snapshot
from poolwatch.model import Snapshot
from tests.helpers import FIXTURES, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def seed_snapshot() -> Snapshot:
    """The seed incident (0.5.4.post1, PD prefill, idle): full balanced, Mamba surplus of 1."""
    return parse_snapshot(json.loads((FIXTURES / "seed-snapshot.json").read_text()))

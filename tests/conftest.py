"""Shared fixtures: the seed snapshot and a fake clock (helpers live in tests/helpers.py)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Generator, Iterator

import pytest
from hypothesis import settings

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.model.snapshot import Snapshot
from rigs.fakes.clock import FakeClock
from rigs.venv import Unavailable
from tests.helpers import FIXTURES

# Property tests are deterministic: every run draws the same examples for a test (derandomize, which
# also means no example database), so a property that fails, fails on every run and on every machine;
# a case one found is pinned as an explicit example.  `pytest --hypothesis-profile=explore` draws
# fresh random examples (500 where a test sets no max_examples) to look for new cases, and prints
# the seed and blob to replay one.  No per-example deadline: timing is the benchmarks' business,
# and on a shared CI box one slow example would fail a property that holds (hypothesis' default is
# 200 ms per example).
settings.register_profile("poolwatch", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None, database=None, max_examples=500, print_blob=True)
settings.load_profile("poolwatch")


def _unavailable(exc: Unavailable) -> None:
    """What a rig could not find: a skip naming the command that makes it, or -- where its
    ``require`` variable is 1 (``.ci/run``) -- a failure."""
    if os.environ.get(exc.require) == "1":
        pytest.fail(str(exc))
    pytest.skip(str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    except Unavailable as exc:  # a fixture's rig
        _unavailable(exc)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    except Unavailable as exc:
        _unavailable(exc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def seed_snapshot() -> Snapshot:
    """The seed incident (0.5.4.post1, PD prefill, idle): full balanced, Mamba surplus of 1."""
    return parse_snapshot(json.loads((FIXTURES / "seed-snapshot.json").read_text()))


@pytest.fixture(autouse=True)
def probe_logger_as_found() -> Iterator[None]:
    """Each test finds ``poolwatch.probe``'s logger as a fresh process has it: an attach in an
    earlier test routes it through that test's engine logger (``lifecycle._engine_logging``), which
    a later test capturing the probe's lines would otherwise see twice."""
    log = logging.getLogger("poolwatch.probe")
    handlers, propagate, level = list(log.handlers), log.propagate, log.level
    yield
    log.handlers[:] = handlers
    log.propagate, log.level = propagate, level

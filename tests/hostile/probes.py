"""A real probe (root) on a fake SGLang scheduler rank, announced in a directory: the hostile tier's
and the probe-secret tests' probe."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.sglang import Rank

__all__ = ["probe_in"]


@contextlib.contextmanager
def probe_in(directory: Path) -> Iterator[SglangProbe]:
    """A real probe (root) on a fake scheduler rank, announced in ``directory``, serving on loopback
    until the block ends (then detached)."""
    rank = Rank()
    config = ProbeConfig(sample_interval_s=0.0, directory=str(directory), release="0.5.9", worker="w")
    probe = attach(SGLANG, rank.sched, config)
    assert isinstance(probe, SglangProbe)
    rank.sched.recv_requests()
    try:
        yield probe
    finally:
        detach(rank.sched)

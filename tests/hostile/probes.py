"""A real probe for the hostile tier: on a fake SGLang scheduler rank, announced in a directory."""

from __future__ import annotations

from pathlib import Path

from tests.probe.sglang.fakes import Rank

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe

__all__ = ["probe_in"]


def probe_in(directory: Path) -> tuple[SglangProbe, Rank]:
    """A real probe (root) on a fake scheduler rank, announced in ``directory``."""
    rank = Rank()
    config = ProbeConfig(sample_interval_s=0.0, directory=str(directory), release="0.5.9", worker="w")
    probe = attach(SGLANG, rank.sched, config)
    assert isinstance(probe, SglangProbe)
    rank.sched.recv_requests()
    return probe, rank

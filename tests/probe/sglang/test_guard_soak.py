"""Guard mode on healthy traffic: a simulated day of heavy PD load on every emulated release, no repair."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from rigs.emulated.soak import soak

RUNS = (("0.5.4.post1", 21), ("0.5.9", 22), ("0.5.12", 23))


def test_three_minutes_of_healthy_pd_load_with_the_guard_on_repair_nothing(tmp_path: Path) -> None:
    result = soak("0.5.4.post1", 5, 3 / 60, str(tmp_path), guard=True)
    assert (result.repairs, result.alerts, result.crashed) == (0, (), ())
    assert result.counts.chunk_steps > 0
    assert (result.refusing, result.refused) == (2, 0)  # guard v2 wraps both ranks, refuses nothing


@pytest.mark.slow
def test_a_day_of_healthy_pd_load_with_the_guard_on_repairs_nothing_and_pages_nobody(tmp_path: Path) -> None:
    hours = float(os.environ.get("POOLWATCH_SOAK_HOURS", "24"))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(len(RUNS), os.cpu_count() or 1), mp_context=context) as pool:
        futures = [pool.submit(soak, v, s, hours, str(tmp_path / f"{v}-{s}"), True) for v, s in RUNS]
        results = [f.result() for f in futures]
    for result in results:
        assert result.hours >= hours
        assert (result.repairs, result.alerts, result.crashed) == (0, (), ()), result
        assert result.counts.chunk_steps > 0
        assert (result.refusing, result.refused) == (2, 0)  # both ranks wrapped on every family

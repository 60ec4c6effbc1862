"""Never cry wolf: heavy fault-free PD load (chunked prefill, aborts, retractions, idle gaps) under
the real probe raises no alert at all, on every emulated release."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from rigs.emulated.soak import SoakResult, soak

RUNS = (("0.5.4.post1", 11), ("0.5.9", 12), ("0.5.12", 13))


def assert_quiet(result: SoakResult, hours: float) -> None:
    assert result.crashed == ()
    assert result.hours >= hours
    assert result.alerts == (), f"{result.version} seed {result.seed}: {result.alerts}"
    assert result.counts.chunk_steps > 0
    assert result.counts.aborts > 0
    assert result.counts.snapshots > 0


def test_ten_minutes_of_fault_free_pd_load_raise_no_alert(tmp_path: Path) -> None:
    result = soak("0.5.9", 5, 10 / 60, str(tmp_path))
    assert_quiet(result, 10 / 60)


@pytest.mark.slow
def test_a_day_of_heavy_fault_free_pd_load_raises_no_alert_on_any_release(tmp_path: Path) -> None:
    hours = float(os.environ.get("POOLWATCH_SOAK_HOURS", "24"))
    workers = max(1, min(len(RUNS), os.cpu_count() or 1))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(soak, v, seed, hours, str(tmp_path / f"{v}-{seed}")) for v, seed in RUNS]
        results = [f.result() for f in futures]
    for result in results:
        assert_quiet(result, hours)
    assert sum(r.retractions for r in results) > 0

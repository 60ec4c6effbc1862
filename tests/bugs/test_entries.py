"""The real-bug suite's tier: every entry re-run on its affected and its fixed release, each in that
release's venv or overlay, and its rows required to equal those ``rigs/bugs/results.json``
recorded (the table in ``docs/bugs.md`` is generated from them).  A bug's two runs are separate
processes and run side by side (most of a run is importing the engine: two cores halve the tier).
A missing venv skips with the command that makes it (fails under ``POOLWATCH_REQUIRE_TOOLS=1``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rigs.bugs import catalog, results, runner

KEYS = ("affected", "fixed")


@pytest.mark.bugs
@pytest.mark.parametrize("bug", catalog.bugs(), ids=lambda bug: bug.id)
def test_the_entry_records_what_the_suite_committed(bug: catalog.Bug) -> None:
    recorded = results.load().get(bug.id, {})
    assert set(recorded) == set(KEYS), f"{bug.id} has no recorded runs: python -m rigs.bugs run {bug.id}"
    for release in bug.releases:
        runner.venv(bug, release).need()  # a missing venv skips (or fails) before anything runs
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = dict(zip(KEYS, pool.map(lambda release: runner.run(bug, release), bug.releases), strict=True))
    assert rows == recorded

"""The real-bug suite's tier: every entry re-run on its affected and its fixed release, each in that
release's venv or overlay, and its row required to equal the one ``rigs/bugs/results.json``
recorded (the table in ``docs/bugs.md`` is generated from those).  A missing venv skips with the
command that makes it (fails under ``POOLWATCH_REQUIRE_TOOLS=1``)."""

from __future__ import annotations

import pytest

from rigs.bugs import catalog, results, runner

CASES = [
    pytest.param(bug, key, release, id=f"{bug.id}-{key}")
    for bug in catalog.bugs()
    for key, release in zip(("affected", "fixed"), bug.releases, strict=True)
]


@pytest.mark.bugs
@pytest.mark.parametrize(("bug", "key", "release"), CASES)
def test_the_entry_records_what_the_suite_committed(bug: catalog.Bug, key: str, release: str) -> None:
    recorded = results.load().get(bug.id, {}).get(key)
    assert recorded is not None, f"{bug.id} has no recorded {key} run: python -m rigs.bugs run {bug.id}"
    assert runner.run(bug, release) == recorded

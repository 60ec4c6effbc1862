"""Guard against every SGLang release of the rigs' table on its own classes, on CPU
(``guard_release.py``: guard v2 on every pool and at the chunk boundary, by ownership at the free,
during HiCache's load-back; a healthy chunk the tree cached balances).

A release with a venv of its own runs there; one that differs from a neighbour only in its
``sglang`` package runs that package over the neighbour's venv (an overlay,
``scripts/sglang_overlay.py``, which says why).  A missing venv or overlay skips its case with the
command that builds it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from poolwatch.probe.sglang.shapes import known_release, shape_for_version
from rigs.bugs import catalog, runner
from rigs.sglang.releases import Tier, release, tier
from tests.tiers import passed

# The suite's double frees guard cannot tell at the free, and why (docs/engines/sglang.md).
UNPROVABLE = {
    "S29": "the offload frees a running request's own columns through its held row: at the free the "
    "same call as a retraction's or a chunk's duplicate free (no tree, transfer or released row owns them)",
}
# What differs from the fixed release after the refusal, by pool: not a free, so nothing to refuse.
NOT_A_FREE = {
    "S09": {
        "swa": "0.5.17's out-of-window frontier frees one more SWA page (once; 0.5.18 keeps it in the tree)"
    },
    "S13": {"full": "0.5.20 lowers protected by hand and never unlocks the node (0.5.21 unlocks it)"},
}


def _guarded(bug: catalog.Bug) -> bool:
    return known_release(bug.affected) and shape_for_version(bug.affected).guarded


DOUBLE_FREES = [
    b
    for b in catalog.select(engine="sglang")
    if b.bug_class == "double-free" and _guarded(b) and b.id not in UNPROVABLE
]


@pytest.mark.sglang
@pytest.mark.parametrize("version", tier(Tier.GUARD))
def test_guard_refuses_every_pools_wrong_free_and_nothing_on_healthy_flows(version: str) -> None:
    ran = passed(release(version).venv(), "tests.sglang_real.guard_release", version, at_least=12)
    load_back = [name for name in ran.names if "HiCache" in name]  # healthy (+ guard off, guard on)
    expected = 1 if release(version).legacy else 3
    assert len(load_back) == expected, sorted(ran.names)


def test_every_guarded_double_free_of_the_suite_is_refused_or_said_why_not() -> None:
    frees = {b.id for b in catalog.select(engine="sglang") if b.bug_class == "double-free" and _guarded(b)}
    assert {b.id for b in DOUBLE_FREES} | set(UNPROVABLE) == frees
    assert {"S09", "S13"} <= {b.id for b in DOUBLE_FREES}


def _balanced(pool: dict[str, Any]) -> bool:
    parts = ("available", "evictable", "protected", "held", "session_held")
    return pool["size"] is None or sum(pool[p] or 0 for p in parts) == pool["size"]


@pytest.mark.sglang
@pytest.mark.parametrize("bug", DOUBLE_FREES, ids=lambda bug: bug.id)
def test_guard_refuses_the_suites_double_frees_before_they_run(bug: catalog.Bug) -> None:
    """The entry's own trigger with guard on: on the affected release the wrong free is refused
    (never struck) and the pool it aimed at ends as on the fixed release, where guard refuses
    nothing; every pool's books balance."""
    for version in bug.releases:
        runner.venv(bug, version).need()  # a missing venv skips (or fails) before anything runs
    with ThreadPoolExecutor(max_workers=2) as pool:
        on, fixed = pool.map(lambda version: runner.run(bug, version, guard=True), bug.releases)
    assert not on["struck"], on
    assert on["refused"], on
    assert fixed["refused"] == [], fixed
    assert not fixed["struck"], fixed
    hit = {name for name, _, _ in on["refused"]}
    for name, account in on["pools"].items():
        other = fixed["pools"][name]
        assert _balanced(account), (name, account)
        if name not in NOT_A_FREE.get(bug.id, {}):
            assert account == other, (name, account, other)
        elif name in hit:  # the free list as the fixed release's: the wrong free never reached it
            assert account["available"] == other["available"], (name, account, other)

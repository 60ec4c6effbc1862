"""Guard against every SGLang release of the rigs' table on its own classes, on CPU
(``guard_release.py``: guard v2 on every pool and at the chunk boundary, by ownership at the free,
during HiCache's load-back; a healthy chunk the tree cached balances).

A release with a venv of its own runs there; one that differs from a neighbour only in its
``sglang`` package runs that package over the neighbour's venv (an overlay,
``scripts/sglang_overlay.py``, which says why).  A missing venv or overlay skips its case with the
command that builds it.
"""

from __future__ import annotations

import pytest

from rigs.sglang.releases import Tier, release, tier
from tests.tiers import passed


@pytest.mark.sglang
@pytest.mark.parametrize("version", tier(Tier.GUARD))
def test_guard_refuses_every_pools_wrong_free_and_nothing_on_healthy_flows(version: str) -> None:
    ran = passed(release(version).venv(), "tests.sglang_real.guard_release", version, at_least=12)
    load_back = [name for name in ran.names if "HiCache" in name]  # healthy (+ guard off, guard on)
    expected = 0 if release(version).unified_tree else 1 if release(version).legacy else 3
    assert len(load_back) == expected, sorted(ran.names)

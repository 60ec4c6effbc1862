"""The SGLang probe's incremental sample against a fresh read on each real release of the probe
tier: ``check_incremental.py`` (a randomized run of the release's own classes with churn, chunks,
aborts, retractions and a leak; every term of every pool equal at every step).  A missing venv skips
its case with the command that builds it (``scripts/prepare_tiers``)."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import Tier, release, tier
from tests.tiers import passed


@pytest.mark.sglang
@pytest.mark.parametrize("version", tier(Tier.PROBE))
def test_the_incremental_sample_equals_a_fresh_read_at_every_step(version: str) -> None:
    passed(release(version).venv(), "tests.sglang_real.check_incremental", version, at_least=3)

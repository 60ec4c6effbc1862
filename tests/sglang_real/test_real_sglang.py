"""The probe against real SGLang releases, on CPU, in cached per-release venvs: ``check_release.py``
on every release of the rigs' table in the probe tier (:mod:`rigs.sglang.releases`), every check it
prints passing.  A missing venv skips its case with the command that builds it
(``scripts/prepare_tiers`` builds them all)."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import Tier, release, tier
from tests.tiers import passed


@pytest.mark.sglang
@pytest.mark.parametrize("version", tier(Tier.PROBE))
def test_the_probe_agrees_with_sglang_and_catches_its_faults(version: str) -> None:
    passed(release(version).venv(), "tests.sglang_real.check_release", version, at_least=10)

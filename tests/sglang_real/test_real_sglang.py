"""The probe against real SGLang releases, on CPU, in cached per-release venvs: ``check_release.py``
on every release of the rigs' table in the probe tier (:mod:`rigs.sglang.releases`), every check it
prints passing.  A missing venv skips its case with the command that builds it
(``scripts/prepare_tiers`` builds them all)."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import RELEASES, Tier, release, tier
from tests.tiers import passed


@pytest.mark.sglang
@pytest.mark.parametrize("version", tier(Tier.PROBE))
def test_the_probe_agrees_with_sglang_and_catches_its_faults(version: str) -> None:
    passed(release(version).venv(), "tests.sglang_real.check_release", version, at_least=10)


def _one_per_family() -> list[str]:
    """A release of each probe family that the probe tier does not run (its hooks and tables)."""
    from poolwatch.probe.sglang.shapes import shape_for_version

    covered = {shape_for_version(v).family for v in tier(Tier.PROBE)}
    first: dict[str, str] = {}
    for rel in RELEASES:
        first.setdefault(shape_for_version(rel.version).family, rel.version)
    return [v for family, v in first.items() if family not in covered]


@pytest.mark.sglang
@pytest.mark.parametrize("version", _one_per_family())
def test_the_probe_wraps_each_family_s_real_loop_and_idle(version: str) -> None:
    passed(release(version).venv(), "tests.sglang_real.hooks_release", version, at_least=2)

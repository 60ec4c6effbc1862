"""The probe's HiCache ``host`` account on real SGLang releases' classes, on CPU (``check_hicache.py``
in the cached release venvs, ``check_hicache_0523.py`` on 0.5.23's unified host pools)."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import Tier, release, tier
from tests.tiers import passed

CHECKS = {"0.5.4.post1": 7, "0.5.9": 8}  # 0.5.9 also runs SGLang's own evict_host
UNIFIED = tuple(v for v in tier(Tier.HICACHE) if release(v).unified_tree)


@pytest.mark.sglang
@pytest.mark.parametrize("version", [v for v in tier(Tier.HICACHE) if v not in UNIFIED])
def test_the_host_account_balances_and_names_a_host_leak_and_double_free_on_real_classes(
    version: str,
) -> None:
    ran = passed(release(version).venv(), "tests.sglang_real.check_hicache", version, timeout=300)
    assert len(ran.results) == CHECKS[version]


@pytest.mark.sglang
@pytest.mark.parametrize("version", UNIFIED)
def test_0_5_23s_kv_host_pool_is_read_coarsely_on_its_real_classes(version: str) -> None:
    ran = passed(release(version).venv(), "tests.sglang_real.check_hicache_0523", timeout=300)
    assert len(ran.results) == 6

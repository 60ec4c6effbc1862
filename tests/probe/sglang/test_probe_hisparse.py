"""HiSparse ranks: the full/swa figures prove a gap only where SGLang itself would check them."""

from __future__ import annotations

import pytest

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.probe.sglang.shapes import shape_for_version
from poolwatch.probe.sglang.snapshot import blur, hisparse_blurs

OFF = {"hisparse": 0, "hisparse_staging": 0}
IDLE_DRAINED = {"hisparse": 1, "hisparse_staging": 0}
STAGING = {"hisparse": 1, "hisparse_staging": 3}
UNREAD = {"hisparse": None, "hisparse_staging": None}


@pytest.mark.parametrize(
    ("version", "phase", "gates", "blurred"),
    [
        ("0.5.9", Phase.BUSY, {}, False),  # no HiSparse before 0.5.10: nothing to read
        ("0.5.10", Phase.BUSY, OFF, False),
        ("0.5.10", Phase.BUSY, IDLE_DRAINED, True),  # busy: the device budget is not a free list
        ("0.5.10", Phase.IDLE, STAGING, True),  # SGLang skips its check while staging
        ("0.5.10", Phase.IDLE, IDLE_DRAINED, False),  # SGLang checks here, so the probe concludes too
        ("0.5.10", Phase.IDLE, UNREAD, True),
        ("0.5.12", Phase.IDLE, IDLE_DRAINED, True),  # 0.5.12 on: SGLang never checks with HiSparse
        ("0.5.23", Phase.IDLE, IDLE_DRAINED, True),
        ("0.5.23", Phase.BUSY, OFF, False),
    ],
)
def test_hisparse_leaves_the_kv_figures_unproven_where_sglang_does_not_check(
    version: str, phase: Phase, gates: dict[str, int | None], blurred: bool
) -> None:
    assert hisparse_blurs(shape_for_version(version), phase, gates) is blurred


def test_a_blurred_account_keeps_its_figures_and_loses_its_gap() -> None:
    full = PoolAccount(Pool.FULL, size=100, available=60, evictable=0, protected=0, held=41,
                       exactness=Exactness.EXACT)  # fmt: skip
    mamba = PoolAccount(Pool.MAMBA, size=8, available=7, evictable=0, protected=0, held=1,
                        exactness=Exactness.EXACT)  # fmt: skip
    pools = {Pool.FULL: full, Pool.MAMBA: mamba}
    assert gap(full) == -1  # what the figures alone would page
    blur(pools)
    assert gap(pools[Pool.FULL]) is None
    assert pools[Pool.FULL].exactness is Exactness.COARSE
    assert (pools[Pool.FULL].size, pools[Pool.FULL].available) == (100, 60)
    assert pools[Pool.MAMBA] is mamba  # the Mamba pool is not HiSparse's

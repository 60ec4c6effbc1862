"""The census schedule's quiet path (one comparison while no interval can end) says exactly what
the whole look says: a randomized run of samples, each asked of two schedules, one of them made
to look at every census every time."""

from __future__ import annotations

import random

import pytest

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.core.schedule import CensusRule, CensusSchedule

RULES = (
    ("blocks", CensusRule(busy_every_s=30.0, idle_every_s=60.0), frozenset({Pool.FULL})),
    ("encoder", CensusRule(busy_every_s=0.0, idle_every_s=0.0), frozenset({Pool.ENCODER})),
    ("mamba", CensusRule(10.0, None, idle_entry_gap_s=5.0), frozenset({Pool.MAMBA})),
)


def _pools(rng: random.Random) -> dict[Pool, PoolAccount]:
    out = {}
    for pool in rng.sample((Pool.FULL, Pool.MAMBA, Pool.ENCODER), rng.randrange(0, 4)):
        held = 5 + (rng.choice((-1, 1, 2)) if rng.random() < 0.15 else 0)  # now and then a gap
        out[pool] = PoolAccount(pool, 10, 5, 0, 0, held, 0, exactness=Exactness.EXACT)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_quiet_path_says_what_the_whole_look_says(seed: int) -> None:
    rng = random.Random(seed)
    quick, whole = CensusSchedule(RULES), CensusSchedule(RULES)
    whole._quiet = lambda now: False  # type: ignore[method-assign]  # the whole look, every time
    now, quiet_answers = 1000.0, 0
    for _ in range(3000):
        now += rng.choice((0.1, 0.1, 0.1, 0.5, 3.0, 12.0))
        idle = rng.random() < 0.2
        quiet_answers += quick._quiet(now)
        assert quick.by_clock(now, idle=idle) == whole.by_clock(now, idle=idle)
        pools, force = _pools(rng), rng.random() < 0.02
        due = quick.due(now, pools, idle=idle, force=force)
        assert due == whole.due(now, pools, idle=idle, force=force)
        for name in due.names:
            quick.ran(name, now)
            whole.ran(name, now)
        assert (quick.last, quick.gaps, quick.was_idle) == (whole.last, whole.gaps, whole.was_idle)
    assert quiet_answers > 100  # the quiet path was taken

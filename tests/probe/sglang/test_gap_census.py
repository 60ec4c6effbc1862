"""A nonzero exact gap in the cheap sample censuses its pool at once (rate-limited), so a leak's
and an SWA double free's slot ids are named while busy, seconds after the fault instead of at the
next busy census (300 s for full KV): the pure rule, the censuses on fakes, the emulator."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.probe.census.proofs import busy_lost
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.schedule import CENSUS_BUDGET, GAP_CENSUS_EVERY_S, CensusSchedule, exact_gaps
from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.requests import collect_live
from poolwatch.probe.sglang.shapes import shape_for_version
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.faults import parse_fault
from poolwatch_emulator.workload import WorkloadConfig
from rigs.fakes.sglang import Rank

# --- the rule -----------------------------------------------------------------------------------


def test_busy_ids_count_only_when_they_account_for_exactly_the_samples_deficit() -> None:
    assert busy_lost(3, 1, 3)
    assert busy_lost(2, 16, 32)  # two pages of 16 slots
    assert not busy_lost(2, 1, 3)  # one more slot held where the census does not look
    assert not busy_lost(4, 1, 3)
    assert not busy_lost(0, 1, 0)
    assert not busy_lost(3, 1, None)  # no exact deficit: no proof


def account(pool: Pool, used: int, held: int, exactness: Exactness = Exactness.EXACT) -> PoolAccount:
    return PoolAccount(
        pool, 100, available=100 - used, evictable=0, protected=0, held=held, exactness=exactness
    )


def test_only_exact_nonzero_gaps_count() -> None:
    pools = {
        Pool.FULL: account(Pool.FULL, 10, 9),  # one lost
        Pool.MAMBA: account(Pool.MAMBA, 4, 4),  # balanced
        Pool.SWA: account(Pool.SWA, 4, 6, Exactness.COARSE),  # not exact: proves nothing
    }
    assert exact_gaps(pools) == {Pool.FULL: 1}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_new_gap_is_censused_at_once_a_standing_one_never_again_a_growing_one_at_most_every_few_s() -> None:
    clock = _Clock()
    c = CensusSchedule(())
    assert c.gapped({}, clock.now) == frozenset()
    assert c.gapped({Pool.FULL: 1}, clock.now) == {Pool.FULL}
    clock.now += 60.0
    assert c.gapped({Pool.FULL: 1}, clock.now) == frozenset()  # standing: nothing more
    assert c.gapped({Pool.FULL: 2}, clock.now) == {Pool.FULL}  # grew
    clock.now += GAP_CENSUS_EVERY_S / 2
    assert c.gapped({Pool.FULL: 3, Pool.MAMBA: 1}, clock.now) == frozenset()  # rate-limited ...
    clock.now += GAP_CENSUS_EVERY_S / 2
    assert c.gapped({Pool.FULL: 3, Pool.MAMBA: 1}, clock.now) == {Pool.FULL, Pool.MAMBA}  # ... then due
    clock.now += GAP_CENSUS_EVERY_S
    assert c.gapped({}, clock.now) == frozenset()  # balanced again: the rate limit is not reset
    assert c.gapped({Pool.FULL: 3}, clock.now) == {Pool.FULL}  # the same gap, back: new again
    assert c.gap_runs == 4


# --- the censuses on fakes ------------------------------------------------------------------------


def test_the_kv_census_names_a_lost_slot_while_busy_only_when_it_is_the_samples_whole_deficit() -> None:
    rank = Rank(kv=16)
    rank.cache(4)
    rank.running("a", origin=3, outputs=1)
    lost = int(rank.alloc.take(1))  # taken and never returned
    reading, shape = Reading(), shape_for_version("0.5.4.post1")
    live = collect_live(rank.sched, reading, "null")
    exact = kv_census(rank.sched, shape, reading, live, idle=False, lost=1)
    other = kv_census(rank.sched, shape, reading, live, idle=False, lost=2)
    plain = kv_census(rank.sched, shape, reading, live, idle=False)
    assert exact is not None
    assert other is not None
    assert plain is not None
    assert exact.missing == (lost,)
    assert [t.kind for t in exact.tripwires("h", 1)] == [TripwireKind.MISSING]
    assert other.missing is None
    assert other.tripwires("h", 1) == ()
    assert plain.missing is None


def test_the_mamba_census_names_a_lost_slot_while_busy_only_when_it_is_the_samples_whole_deficit() -> None:
    rank = Rank(mamba=8)
    rank.cache(3)
    rank.running("a", origin=4, outputs=2)
    lost = int(rank.mamba.take())  # taken and never returned
    reading, shape = Reading(), shape_for_version("0.5.4.post1")
    live = collect_live(rank.sched, reading, "null")
    exact = mamba_census(rank.sched, shape, reading, live, idle=False, lost=1)
    other = mamba_census(rank.sched, shape, reading, live, idle=False, lost=3)
    assert exact is not None
    assert other is not None
    assert exact.missing == (lost,)
    assert other.missing is None
    assert other.missing_ids == ()


def test_the_census_budget_charges_a_walk_all_it_cost_the_thread() -> None:
    """The next gap walk is spaced out by the whole sample that walked -- the census, the read
    around it and the proofs delivered --, not by the census loop alone."""
    rank = Rank(kv=16)
    probe = attach(SGLANG, rank.sched, ProbeConfig(serve=False, directory="/nonexistent-poolwatch-dir"))
    try:
        started = time.perf_counter()
        probe.sample_now("test", census=True)
        whole = time.perf_counter() - started
        assert probe.census_total == 1
        assert probe.census_cost < probe.schedule.pass_cost <= whole
        assert probe.schedule.gap_interval >= probe.schedule.pass_cost / CENSUS_BUDGET
    finally:
        detach(rank.sched)


# --- the emulator -------------------------------------------------------------------------------

PRESSURE = ModelShape(full_kv_tokens=16_384, context_len=32_768)
SWA = ModelShape(mamba_slots=None, swa_kv_tokens=131_072, page_size=16, context_len=32_768)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="poolwatch-gap-") as tmp:
        yield Path(tmp)


def named_while_busy(
    config: ClusterConfig, fault: str, pool: Pool, directory: Path, horizon: float
) -> list[Tripwire]:
    """The tripwires of ``pool`` a probe published within ``horizon`` simulated s of ``fault``
    striking, in busy snapshots."""
    cluster = Cluster(replace(config, faults=(parse_fault(f"{fault}@step=40"),), idle_check_strict=False))
    for worker in cluster.workers:
        conf = ProbeConfig(directory=str(directory), serve=False, worker=worker.name, release=config.version)
        for rank in worker.ranks:
            probe = attach(SGLANG, rank, conf, serve=False)
            probe.clock, probe.wall = (lambda: cluster.clock.now), cluster.clock.unix
    struck: float | None = None
    found: list[Tripwire] = []
    try:
        while cluster.clock.now < 120.0 and (struck is None or cluster.clock.now < struck + horizon):
            cluster.step()
            for rank in cluster.schedulers:
                if struck is None and rank.faults.fired[fault]:
                    struck = cluster.clock.now
                snap = probe_of(rank).latest  # type: ignore[union-attr]
                if struck is not None and snap is not None and snap.phase is Phase.BUSY:
                    found += [t for t in snap.tripwires if t.pool is pool and t not in found]
    finally:
        cluster.stop()
        for rank in cluster.schedulers:
            detach(rank)
    assert struck is not None, "the fault never struck"
    return found


def test_a_full_kv_leak_is_named_while_busy_within_seconds_of_the_fault(workdir: Path) -> None:
    config = ClusterConfig(
        version="0.5.9",
        unified=1,
        prefill=0,
        decode=0,
        shape=PRESSURE,
        workload=WorkloadConfig(burst_s=30, gap_s=60, rate=20),
        seed=7,
    )
    found = named_while_busy(config, "full-kv-leak-on-retract", Pool.FULL, workdir, horizon=5.0)
    assert [t.kind for t in found] == [TripwireKind.MISSING]
    assert len(found[0].slots) == 1


def test_an_swa_double_free_is_named_while_busy_within_seconds_of_the_fault(workdir: Path) -> None:
    config = ClusterConfig(
        version="0.5.12",
        unified=1,
        prefill=0,
        decode=0,
        shape=SWA,
        workload=WorkloadConfig(burst_s=5, gap_s=60),
        seed=7,
    )
    found = named_while_busy(config, "swa-page-overcount", Pool.SWA, workdir, horizon=5.0)
    assert TripwireKind.FREE_DUPLICATE in {t.kind for t in found}
    assert {t.page_size for t in found} == {16}  # page ids, each 16 slots of the gap

"""The counter book (the neutral half of the counter witness): what a census measured, kept until it
agrees again, and every sample's figure judged from it; nothing below zero ever published."""

from __future__ import annotations

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.census.readings import CounterReading
from poolwatch.probe.core.counters import CounterBook
from poolwatch.probe.core.schedule import CensusRule, CensusSchedule


def _full(protected: int, available: int = 100) -> PoolAccount:
    return PoolAccount(
        Pool.FULL, 200, available, 50, protected, 200 - available - 50 - 10, 0, exactness=Exactness.EXACT
    )


def test_a_measured_drift_judges_every_later_sample_until_a_census_finds_agreement() -> None:
    book = CounterBook()
    assert book.judged({Pool.FULL: _full(10)})[Pool.FULL].protected == 10
    reading = CounterReading(Pool.FULL, "protected", "tree_cache.protected_size()", 51, 10)
    assert book.measured([reading], seq=7, wall=100.0)
    assert book.judged({Pool.FULL: _full(51)})[Pool.FULL].protected == 10
    assert book.judged({Pool.FULL: _full(55)})[Pool.FULL].protected == 14  # moved with the counter
    assert not book.measured([reading], seq=9, wall=120.0)  # the same drift: nothing new
    [w] = book.all()
    assert (w.seq, w.since_seq, w.since, w.drift) == (9, 7, 100.0, 41)
    assert book.measured([CounterReading(Pool.FULL, "protected", "c", 10, 10)], seq=11, wall=130.0)
    assert book.all() == ()


def test_a_figure_below_zero_is_never_published_and_asks_for_a_census_once() -> None:
    book = CounterBook()
    pools = {Pool.FULL: _full(-12)}
    assert book.suspect(pools)
    judged = book.judged(pools)[Pool.FULL]
    assert judged.protected is None
    assert "protected below zero" in judged.unreadable
    book.measured([CounterReading(Pool.FULL, "protected", "c", -12, 12)], seq=3, wall=1.0)
    assert not book.suspect(pools)  # measured at this value: no census again
    assert book.judged(pools)[Pool.FULL].protected == 12
    assert book.suspect({Pool.FULL: _full(-13)})  # a new value below zero: census again


def test_a_new_surplus_is_censused_at_once_a_growing_leak_at_the_rate_limit() -> None:
    schedule = CensusSchedule([("kv", CensusRule(busy_every_s=3600.0), frozenset({Pool.FULL}))])
    schedule.pass_cost = 0.001
    deficit = {Pool.FULL: PoolAccount(Pool.FULL, 10, 4, 0, 0, 5, 0, exactness=Exactness.EXACT)}
    surplus = {Pool.FULL: PoolAccount(Pool.FULL, 10, 4, 0, 0, 7, 0, exactness=Exactness.EXACT)}
    assert schedule.due(0.0, deficit, idle=False).names == frozenset({"kv"})
    grown = {Pool.FULL: PoolAccount(Pool.FULL, 10, 3, 0, 0, 5, 0, exactness=Exactness.EXACT)}
    assert not schedule.due(1.0, grown, idle=False)  # a growing leak waits out the 5 s limit
    assert schedule.due(1.0, surplus, idle=False).names == frozenset({"kv"})  # a surplus does not

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import slot_counts

from poolwatch.conservation import Balance, Basis, assess, assess_snapshot, describe, gap, used
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Snapshot


def exact(
    pool: Pool, size: int, avail: int, evict: int, prot: int = 0, held: int = 0, sess: int = 0
) -> PoolAccount:
    return PoolAccount(pool, size, avail, evict, prot, held, sess, exactness=Exactness.EXACT)


def test_the_seed_reads_as_a_mamba_double_free_with_a_balanced_full_pool(seed_snapshot: Snapshot) -> None:
    findings = assess_snapshot(seed_snapshot)
    assert describe(findings) == "mamba: surplus of 1 slot (double free); full: balanced"
    by_pool = {f.pool: f for f in findings}
    assert by_pool[Pool.MAMBA].gap == -1
    assert by_pool[Pool.FULL].gap == 0


def test_the_seed_reads_the_same_from_coarse_idle_figures() -> None:
    mamba = PoolAccount(Pool.MAMBA, 476, 473, 4)
    finding = assess(mamba, Phase.IDLE)
    assert (finding.balance, finding.gap, finding.basis) == (Balance.SURPLUS, -1, Basis.NEGATIVE_USED)


@given(
    size=slot_counts,
    avail=slot_counts,
    evict=slot_counts,
    prot=slot_counts,
    held=slot_counts,
    sess=slot_counts,
)
def test_the_gap_is_size_minus_every_state(
    size: int, avail: int, evict: int, prot: int, held: int, sess: int
) -> None:
    account = exact(Pool.FULL, size, avail, evict, prot, held, sess)
    assert gap(account) == size - avail - evict - prot - held - sess


@given(states=st.lists(slot_counts, min_size=5, max_size=5), delta=st.integers(-1000, 1000))
def test_the_sign_of_the_gap_decides_the_balance(states: list[int], delta: int) -> None:
    size = sum(states) + delta
    finding = assess(exact(Pool.MAMBA, size, *states), Phase.BUSY)
    expected = Balance.DEFICIT if delta > 0 else Balance.SURPLUS if delta < 0 else Balance.BALANCED
    assert finding.balance is expected
    assert finding.slots == abs(delta)
    assert finding.basis is Basis.EXACT


@given(size=slot_counts, avail=slot_counts, evict=slot_counts)
def test_negative_used_always_proves_a_surplus_whatever_the_phase(size: int, avail: int, evict: int) -> None:
    account = PoolAccount(Pool.MAMBA, size, avail, evict)
    for phase in Phase:
        finding = assess(account, phase)
        if size - avail - evict < 0:
            assert finding.balance is Balance.SURPLUS
            assert finding.gap == size - avail - evict


def test_a_busy_coarse_pool_with_positive_used_proves_nothing() -> None:
    finding = assess(PoolAccount(Pool.FULL, 100, 50, 10), Phase.BUSY)
    assert (finding.balance, finding.gap, finding.basis) == (Balance.UNKNOWN, None, Basis.NONE)


@pytest.mark.parametrize(
    ("used_slots", "session", "balance", "expected_gap"),
    [
        (0, None, Balance.BALANCED, 0),
        (7, None, Balance.DEFICIT, 7),
        (7, 7, Balance.BALANCED, 0),
        (3, 5, Balance.SURPLUS, -2),
    ],
)
def test_at_full_idle_used_must_equal_session_held(
    used_slots: int, session: int | None, balance: Balance, expected_gap: int
) -> None:
    account = PoolAccount(Pool.FULL, 100, 100 - used_slots, 0, session_held=session)
    finding = assess(account, Phase.IDLE)
    assert (finding.balance, finding.gap, finding.basis) == (balance, expected_gap, Basis.IDLE_RESIDUAL)


def test_a_reported_used_count_stands_in_for_available_and_evictable() -> None:
    account = PoolAccount(Pool.MAMBA, 476, used=-1)
    assert used(account) == -1
    assert assess(account, Phase.BUSY).balance is Balance.SURPLUS


def test_an_exact_pool_missing_a_term_is_not_given_an_exact_gap() -> None:
    account = PoolAccount(
        Pool.FULL, 100, 90, 10, None, 0, exactness=Exactness.EXACT, unreadable=("protected",)
    )
    assert gap(account) is None
    assert assess(account, Phase.BUSY).basis is Basis.NONE


def test_unknown_pools_are_described_last_and_plurals_are_right() -> None:
    findings = (
        assess(PoolAccount(Pool.FULL, None), Phase.BUSY),
        assess(exact(Pool.SWA, 10, 5, 0, 0, 2), Phase.BUSY),
        assess(PoolAccount(Pool.MAMBA, 10, 12, 1), Phase.BUSY),
    )
    assert describe(findings) == (
        "swa: deficit of 3 slots (leak); mamba: surplus of at least 3 slots (double free); full: unknown"
    )

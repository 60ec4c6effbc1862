from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.helpers import seed_issue
from tests.strategies import slot_counts

from poolwatch.conservation import assess, describe
from poolwatch.model.rank import Exactness, IncidentKind, Phase, Pool, PoolAccount
from poolwatch.model.snapshot import Incident
from poolwatch.sources.sglang.log.formats import LEAK_FORMATS
from poolwatch.sources.sglang.log.leak_message import find_reports, parse_leak_figures, report_at

SEED_LINES = [
    "ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, "
    "full_evictable_size=1066, self.token_to_kv_pool_allocator.size=1664761, "
    "self.tree_cache.full_protected_size()=0",
    "mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, "
    "self.tree_cache.mamba_protected_size()=0",
    "NotImplementedError",
]


def find_incidents(lines: list[str], at: float) -> list[Incident]:
    return [r.incident for r in find_reports(lines, at)]


def exact(
    pool: Pool, size: int, available: int, evictable: int = 0, protected: int = 0, **rest: int
) -> PoolAccount:
    return PoolAccount(
        pool,
        size,
        available,
        evictable,
        protected,
        rest.get("held", 0),
        rest.get("session_held", 0),
        exactness=Exactness.EXACT,
    )


def verdict(pools: tuple[PoolAccount, ...]) -> str:
    return describe(tuple(assess(a, Phase.IDLE) for a in pools))


def test_the_seed_leak_message_is_a_mamba_surplus_of_one_slot() -> None:
    (incident,) = find_incidents(SEED_LINES, 1.0)
    assert incident.kind is IncidentKind.LEAK_DETECTED
    assert incident.pools == (exact(Pool.FULL, 1664761, 1663695, 1066), exact(Pool.MAMBA, 476, 473, 4))
    assert verdict(incident.pools) == "mamba: surplus of 1 slot (double free); full: balanced"
    assert "NotImplementedError" not in incident.message


@pytest.mark.parametrize(
    ("lines", "kind", "pools"),
    [
        pytest.param(
            [
                "token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=200000, "
                "available_size=199000, evictable_size=990, protected_size=0"
            ],
            IncidentKind.LEAK_DETECTED,
            (exact(Pool.FULL, 200000, 199000, 990),),
            id="0.5.4-radix",
        ),
        pytest.param(
            [
                "token_to_kv_pool_allocator memory leak detected! self.full_tokens_per_layer=4096, "
                "full_available_size=4000, full_evictable_size=90, self.tree_cache.full_protected_size()=6",
                "self.swa_tokens_per_layer=1024, swa_available_size=1030, swa_evictable_size=0, "
                "self.tree_cache.swa_protected_size()=0",
            ],
            IncidentKind.LEAK_DETECTED,
            (exact(Pool.FULL, 4096, 4000, 90, 6), exact(Pool.SWA, 1024, 1030)),
            id="0.5.9-swa",
        ),
        pytest.param(
            [
                "token_to_kv_pool_allocator memory leak detected! "
                "full_available_size=901234, full_evictable_size=0, "
                "self.token_to_kv_pool_allocator.size=901234, self.tree_cache.full_protected_size()=0",
                "mamba_available_size=383, mamba_evictable_size=0, "
                "self.req_to_token_pool.mamba_pool.size=384, self.tree_cache.mamba_protected_size()=0, "
                "leaked_full_pages=None, leaked_mamba_pages={0, 17}",
            ],
            IncidentKind.LEAK_DETECTED,
            (exact(Pool.FULL, 901234, 901234), exact(Pool.MAMBA, 384, 383)),
            id="0.5.9-mamba-census",
        ),
        pytest.param(
            [
                "pool memory leak detected! [full] total=512000, available=511000, evictable=1000, "
                "protected=0, "
                "session_held=0, uncached=0",
                "[mamba] total=320, available=321, evictable=0, protected=0, session_held=0, uncached=0, "
                "leaked_full_pages=None, leaked_mamba_pages={0}",
            ],
            IncidentKind.LEAK_DETECTED,
            (exact(Pool.FULL, 512000, 511000, 1000), exact(Pool.MAMBA, 320, 321)),
            id="0.5.12-pool",
        ),
        pytest.param(
            ["req_to_token_pool memory leak detected!available_size=105, session_held=2, total_size=108"],
            IncidentKind.LEAK_DETECTED,
            (exact(Pool.REQ, 108, 105, session_held=2),),
            id="0.5.12-req",
        ),
        pytest.param(
            ["AssertionError: Mem Leak Detected! total_tokens=199990 vs self.max_total_num_tokens=200000"],
            IncidentKind.BUSY_CHECK_FAILED,
            (exact(Pool.FULL, 200000, 199990),),
            id="0.5.4-busy",
        ),
        pytest.param(
            [
                "AssertionError: Full Pool Mem Leak Detected! [full] total=512000, available=500000, "
                "evictable=1000, "
                "protected=2048, session_held=0, uncached=8951"
            ],
            IncidentKind.BUSY_CHECK_FAILED,
            (exact(Pool.FULL, 512000, 500000, 1000, 2048, held=8951),),
            id="0.5.12-busy",
        ),
        pytest.param(
            ["Exception: Mamba Radix tree sanity check failed, ping @yizhang2077: 3 != 2"],
            IncidentKind.TREE_SANITY_FAILED,
            (),
            id="tree-sanity",
        ),
    ],
)
def test_the_leak_messages_of_every_release_give_their_figures(
    lines: list[str], kind: IncidentKind, pools: tuple[PoolAccount, ...]
) -> None:
    (incident,) = find_incidents(lines, 5.0)
    assert (incident.kind, incident.pools, incident.at) == (kind, pools, 5.0)


def test_the_figures_name_the_imbalance_in_each_format() -> None:
    whole = "pool memory leak detected! [mamba] total=320, available=321, evictable=0, protected=0, "
    assert verdict(parse_leak_figures([whole + "session_held=0, uncached=0"])) == (
        "mamba: surplus of 1 slot (double free)"
    )
    busy = parse_leak_figures(["Mem Leak Detected! total_tokens=199990 vs self.max_total_num_tokens=200000"])
    assert verdict(busy) == "full: deficit of 10 slots (leak)"


def test_a_report_cut_short_proves_no_sign_but_a_surplus_its_figures_prove_whatever_follows() -> None:
    cut = parse_leak_figures(["pool memory leak detected! [mamba] total=320, available=321"])
    assert verdict(cut) == "mamba: unknown"  # evictable and protected are gone: unknown, never 0
    assert cut[0].unreadable == ("evictable", "protected", "session_held", "held")
    bound = parse_leak_figures(
        ["pool memory leak detected! [full] total=10, available=9, evictable=3, protected=0"]
    )
    assert verdict(bound) == "full: surplus of at least 2 slots (double free)"  # held counts only add to it


def test_a_negative_counter_is_a_counter_error_with_no_sign() -> None:
    (report,) = find_reports(
        [
            "ValueError: pool memory leak detected! [full] total=205888, available=205888, evictable=0, "
            "protected=-12, session_held=0, uncached=0"
        ],
        1.0,
    )
    assert verdict(report.incident.pools) == "full: unknown"
    assert report.error is not None
    assert (report.error.cls.value, report.error.bugs) == ("counter", ("S13",))


def test_a_marker_quoted_as_source_code_is_not_a_report() -> None:
    quoted = [
        '            msg = "token_to_kv_pool_allocator memory leak detected! " f"{token_msg}"',
        '        assert not full_leak, f"Full Pool Mem Leak Detected! {full_msg}"',
        '            msg = f"Mamba Radix tree sanity check failed, ping @yizhang2077: {e}"',
    ]
    assert find_incidents(quoted, 0.0) == []


def test_the_whole_seed_issue_text_yields_one_report() -> None:
    lines = seed_issue().read_text().splitlines()
    (incident,) = find_incidents(lines, 0.0)
    assert verdict(incident.pools) == "mamba: surplus of 1 slot (double free); full: balanced"


def test_a_message_without_a_size_gives_no_account() -> None:
    assert parse_leak_figures(["pool memory leak detected! [full] available=3, evictable=1"]) == ()


@given(slot_counts, slot_counts, slot_counts, slot_counts, slot_counts, slot_counts, slot_counts)
def test_any_0_5_4_mamba_message_round_trips(
    fa: int, fe: int, fs: int, fp: int, ma: int, me: int, ms: int
) -> None:
    lines = [
        f"token_to_kv_pool_allocator memory leak detected! full_available_size={fa}, "
        f"full_evictable_size={fe}, "
        f"self.token_to_kv_pool_allocator.size={fs}, self.tree_cache.full_protected_size()={fp}",
        f"mamba_available_size={ma}, mamba_evictable_size={me}, self.req_to_token_pool.mamba_pool.size={ms}, "
        "self.tree_cache.mamba_protected_size()=0",
    ]
    (incident,) = find_incidents(lines, 0.0)
    full = (
        exact(Pool.FULL, fs, fa, fe, fp)
        if fp <= fs
        else PoolAccount(Pool.FULL, fs, unreadable=("protected>size",))
    )
    assert incident.pools == (full, exact(Pool.MAMBA, ms, ma, me))


@given(
    st.sampled_from(["full", "swa", "mamba"]),
    slot_counts,
    slot_counts,
    slot_counts,
    slot_counts,
    slot_counts,
    slot_counts,
)
def test_any_0_5_12_pool_line_round_trips(
    tag: str, total: int, available: int, evictable: int, protected: int, session: int, uncached: int
) -> None:
    line = (
        f"pool memory leak detected! [{tag}] total={total}, available={available}, evictable={evictable}, "
        f"protected={protected}, session_held={session}, uncached={uncached}"
    )
    expected = exact(Pool(tag), total, available, evictable, protected, held=uncached, session_held=session)
    if protected > total:  # a counter that cannot be right: the figures prove no sign
        expected = PoolAccount(Pool(tag), total, unreadable=("protected>size",))
    assert parse_leak_figures([line]) == (expected,)


@given(st.lists(st.text(max_size=300), max_size=20))
def test_any_text_is_read_without_failing(lines: list[str]) -> None:
    for incident in find_incidents(lines, 0.0):
        assert len(incident.message) <= 2000


@pytest.mark.parametrize(
    ("lines", "name", "pools"),
    [
        pytest.param(
            [
                "/x/model_rpc.py:259: UserWarning: Warning: available_size=38120, max_total_num_token=38264",
                "KV cache pool leak detected!",
                "  warnings.warn(",
            ],
            "kv-warning-0.1",
            (exact(Pool.FULL, 38264, 38120),),
            id="0.1-figures-before-the-marker-size-without-s",
        ),
        pytest.param(
            [
                "/x/tp_worker.py:318: UserWarning: Warning: available req slots=2047, total slots=2048",
                "Memory pool leak detected!",
            ],
            "req-warning-0.2",
            (exact(Pool.REQ, 2048, 2047),),
            id="0.2-request-slots",
        ),
        pytest.param(
            [
                "/x/scheduler.py:710: UserWarning: KV cache pool leak detected!available_size=149996, "
                "self.max_total_num_tokens=150004",
                "",
                "  warnings.warn(msg)",
            ],
            "kv-warning-0.3",
            (exact(Pool.FULL, 150004, 149996),),
            id="0.3-warnings-form",
        ),
        pytest.param(
            ["Memory pool leak detected!available_size=4095, total_size=4096"],
            "req-warning-0.3",
            (exact(Pool.REQ, 4096, 4095),),
            id="0.3-request-pool",
        ),
        pytest.param(
            [
                "KV cache pool leak detected!available_size=90, protected_size=10, "
                "self.max_total_num_tokens=100",
            ],
            "kv-warning-0.3",
            (exact(Pool.FULL, 100, 90, protected=10),),
            id="0.4.3-hierarchical-protected",
        ),
        pytest.param(
            [
                "scheduler.py:1326: UserWarning: token_to_kv_pool_allocator memory leak detected! "
                "available_size=200016, protected_size=0, self.max_total_num_tokens=200000",
                "self.token_to_kv_pool_allocator.available_size()=150016",
                "self.tree_cache.evictable_size()=50000",
            ],
            "kv-allocator-0.4.6",
            (exact(Pool.FULL, 200000, 150016, 50000),),
            id="0.4.6-evictable-counted-once",
        ),
        pytest.param(
            [
                "token_to_kv_pool_allocator memory leak detected! available_size=200016, protected_size=0, "
                "self.max_total_num_tokens=200000"
            ],
            "kv-allocator-0.4.6",
            (exact(Pool.FULL, 200000, 200016),),
            id="0.4.6-without-its-detail-lines",
        ),
        pytest.param(
            [
                "ValueError: token_to_kv_pool_allocator memory leak detected! "
                "self.max_total_num_tokens=270331, available_size=644, evictable_size=269628, "
                "protected_size=0"
            ],
            "kv-allocator-0.5",
            (exact(Pool.FULL, 270331, 644, 269628),),
            id="0.5.3-evictable-apart",
        ),
        pytest.param(
            ["Sanity check FAILED (2 violations across 911 nodes):", "  [Size] Mamba evictable_size_=12"],
            "tree-sanity-0.5.23",
            (),
            id="0.5.23-tree",
        ),
    ],
)
def test_the_older_and_newest_formats_are_in_the_table_and_give_their_figures(
    lines: list[str], name: str, pools: tuple[PoolAccount, ...]
) -> None:
    (incident,) = find_incidents(lines, 1.0)
    assert report_at(next(line for line in lines if report_at(line))).name == name  # type: ignore[union-attr]
    assert incident.pools == pools


def test_the_0_4_6_report_is_a_surplus_of_its_own_size_not_of_evictable_twice() -> None:
    lines = [
        "token_to_kv_pool_allocator memory leak detected! available_size=3189424, protected_size=0, "
        "self.max_total_num_tokens=3185200",
        "self.token_to_kv_pool_allocator.available_size()=2864304",
        "self.tree_cache.evictable_size()=325120",
    ]
    assert verdict(find_incidents(lines, 0.0)[0].pools) == "full: surplus of 4224 slots (double free)"


def test_a_number_cut_at_a_lines_length_bound_is_not_read() -> None:
    cut = (
        "mamba_available_size=315, mamba_evictable_size=138, self.req_to_token_pool.mamba_pool.size=45\u2026"
    )
    assert parse_leak_figures(["token_to_kv_pool_allocator memory leak detected! x=1", cut]) == ()


def test_every_format_names_its_release_family() -> None:
    assert all(f.releases and f.name for f in LEAK_FORMATS)
    assert len({f.name for f in LEAK_FORMATS}) == len(LEAK_FORMATS)

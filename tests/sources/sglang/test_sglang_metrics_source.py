from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.sources.sglang.fakes import SGLANG, Handler, captured, sglang_server
from tests.strategies import slot_counts

from poolwatch.conservation import assess_snapshot, describe
from poolwatch.errors import PayloadError, Reason, ScrapeError
from poolwatch.model.rank import Phase, Pool, PoolAccount, Role
from poolwatch.sources.base import Source, Target
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.sglang.gauges import ServerInfo, parse_server_info, pool_accounts, queues
from poolwatch.sources.sglang.metrics import IdleWatch, SglangMetricsSource, parse_metrics_page
from rigs.fakes.clock import FakeClock


def source(
    handler: Handler, clock: FakeClock, role: Role = Role.UNIFIED
) -> tuple[SglangMetricsSource, httpx.AsyncClient]:
    target = Target("sglang", "sglang-metrics", "http://sglang:30000", "decode-0", role)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return SglangMetricsSource(target, clock), client


def test_the_0_5_4_post1_page_gives_the_full_used_count_and_no_mamba_figure() -> None:
    page, info = captured("v0.5.4.post1-pd-prefill")
    ranks = parse_metrics_page(page)
    assert list(ranks) == [Ranks(0, 0, 0)]
    gauges = ranks[Ranks()]
    accounts = pool_accounts(gauges, parse_server_info(info), 0)
    assert accounts == {Pool.FULL: PoolAccount(Pool.FULL, 1664761, used=0)}
    assert queues(gauges) == {
        "running": 0,
        "waiting": 0,
        "grammar": 0,
        "bootstrap": 0,
        "inflight": 0,
        "prealloc": 0,
        "transfer": 0,
    }
    assert gauges.model == "/models/qwen_next/Qwen3-Next-80B-A3B-Instruct"
    assert gauges.role is None  # 0.5.4.post1 labels every engine "unified"


def test_the_0_5_9_mamba_ratio_becomes_a_count_with_the_pool_size() -> None:
    page, info = captured("v0.5.9-unified")
    gauges = parse_metrics_page(page)[Ranks()]
    accounts = pool_accounts(gauges, parse_server_info(info), 0)
    assert accounts[Pool.MAMBA] == PoolAccount(Pool.MAMBA, 384, used=1)
    assert accounts[Pool.FULL] == PoolAccount(Pool.FULL, 901234, used=0)
    assert Pool.SWA not in accounts  # SGLang sets the SWA ratio to 0 for a model without SWA


def test_a_mamba_ratio_without_a_known_size_proves_only_its_sign() -> None:
    page, _ = captured("v0.5.9-unified")
    gauges = parse_metrics_page(page.replace("0.0026041666666666665", "-0.0026041666666666665"))[Ranks()]
    assert pool_accounts(gauges, ServerInfo(), 0)[Pool.MAMBA] == PoolAccount(Pool.MAMBA, None, used=-1)


def test_a_ratio_that_is_not_a_whole_count_of_the_size_proves_only_its_sign() -> None:
    page, info = captured("v0.5.9-unified")
    gauges = parse_metrics_page(page.replace("0.0026041666666666665", "0.003"))[Ranks()]
    assert pool_accounts(gauges, parse_server_info(info), 0)[Pool.MAMBA] == PoolAccount(Pool.MAMBA, 384)


def test_the_0_5_12_page_gives_every_pool_of_every_dp_rank_with_sizes_from_the_gauges() -> None:
    page, _ = captured("v0.5.12-dp2-decode")
    ranks = parse_metrics_page(page)
    assert sorted(ranks) == [Ranks(0, 0, 0), Ranks(1, 0, 0)]
    busy = pool_accounts(ranks[Ranks(0)], ServerInfo(), 0)
    idle = pool_accounts(ranks[Ranks(1)], ServerInfo(), 1)
    assert busy == {
        Pool.FULL: PoolAccount(Pool.FULL, 512000, 508928, 0, used=3072),
        Pool.MAMBA: PoolAccount(Pool.MAMBA, 320, 314, 0, used=6),
    }
    assert idle[Pool.MAMBA] == PoolAccount(Pool.MAMBA, 320, 321, 0, used=-1)
    assert ranks[Ranks(1)].role is Role.DECODE
    assert queues(ranks[Ranks(0)])["transfer"] == 1


def test_queue_gauges_split_by_priority_are_summed() -> None:
    page = (
        'sglang:num_queue_reqs{tp_rank="0",priority="1"} 2\n'
        'sglang:num_queue_reqs{tp_rank="0",priority="5"} 3\n'
        'sglang:num_running_reqs{tp_rank="0"} 0\n'
    )
    assert queues(parse_metrics_page(page)[Ranks()]) == {"waiting": 5, "running": 0}


def test_a_broken_page_is_a_parse_error() -> None:
    with pytest.raises(PayloadError) as err:
        parse_metrics_page('sglang:num_running_reqs{tp_rank="0" 1\n')
    assert err.value.reason is Reason.PARSE


@pytest.mark.parametrize("doc", [None, [], "x", {"internal_states": "x"}, {"internal_states": [None, 3]}])
def test_odd_server_info_leaves_sizes_unknown(doc: object) -> None:
    assert parse_server_info(doc) == ServerInfo()


ZEROS = {"running": 0, "waiting": 0}


def test_idle_is_proven_only_after_the_gauges_sat_still_for_the_whole_window() -> None:
    watch = IdleWatch(confirm=35.0)
    pools = {Pool.MAMBA: PoolAccount(Pool.MAMBA, 384, used=1)}
    assert watch.observe({"running": 2, "waiting": 0}, pools, 0.0) is Phase.BUSY
    assert watch.observe(ZEROS, pools, 1.0) is Phase.UNKNOWN  # maybe a prefill batch's stale figures
    assert watch.observe(ZEROS, pools, 30.0) is Phase.UNKNOWN
    assert watch.observe(ZEROS, pools, 36.0) is Phase.IDLE
    moved = {Pool.MAMBA: PoolAccount(Pool.MAMBA, 384, used=0)}
    assert watch.observe(ZEROS, moved, 37.0) is Phase.UNKNOWN  # SGLang refreshed: start again
    assert watch.observe(ZEROS, moved, 72.0) is Phase.IDLE
    assert watch.observe({"running": 0, "waiting": 1}, moved, 73.0) is Phase.BUSY


def test_without_queue_gauges_idleness_is_unknown() -> None:
    assert IdleWatch(confirm=0.0).observe({}, {}, 100.0) is Phase.UNKNOWN


async def test_the_source_reads_the_two_safe_endpoints_only() -> None:
    seen: list[str] = []
    src, client = source(sglang_server(*captured("v0.5.12-dp2-decode"), seen=seen), FakeClock())
    async with client:
        assert isinstance(src, Source)
        await src.scrape(client)
        await src.scrape(client)
    assert seen == ["/metrics", "/get_server_info", "/metrics"]  # sizes are re-read only every few minutes
    assert "/get_load" not in seen


async def test_a_leak_at_idle_shows_once_the_idle_state_is_confirmed() -> None:
    clock = FakeClock()
    src, client = source(sglang_server(*captured("v0.5.9-unified")), clock)
    async with client:
        (first,) = await src.scrape(client)
        clock.advance(40.0)
        (later,) = await src.scrape(client)
    assert first.phase is Phase.UNKNOWN
    assert describe(assess_snapshot(first)) == "full: unknown; mamba: unknown"
    assert later.phase is Phase.IDLE
    assert describe(assess_snapshot(later)) == "mamba: deficit of 1 slot (leak); full: balanced"
    assert later.worker.release == "0.5.9"
    assert later.worker.model == "Qwen/Qwen3-Next-80B-A3B-Instruct"


async def test_a_negative_used_count_is_a_surplus_at_once() -> None:
    src, client = source(sglang_server(*captured("v0.5.12-dp2-decode")), FakeClock())
    async with client:
        busy, idle = await src.scrape(client)
    assert (busy.worker.key, idle.worker.key) == ("decode-0/dp0-tp0-pp0", "decode-0/dp1-tp0-pp0")
    assert describe(assess_snapshot(idle)) == "mamba: surplus of at least 1 slot (double free); full: unknown"
    assert busy.phase is Phase.BUSY
    assert idle.worker.role is Role.DECODE
    assert idle.worker.instance == "http://sglang:30000"


async def test_server_info_failing_is_not_a_failed_scrape() -> None:
    page, _ = captured("v0.5.4.post1-pd-prefill")

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=page) if request.url.path == "/metrics" else httpx.Response(500)

    src, client = source(handle, FakeClock())
    async with client:
        (snap,) = await src.scrape(client)
    assert snap.pools[Pool.FULL] == PoolAccount(Pool.FULL, None, used=0)


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(503), Reason.HTTP_STATUS),
        (httpx.Response(200, text="# nothing from sglang here\nprocess_cpu_seconds_total 3\n"), Reason.PARSE),
        (httpx.Response(200, text='sglang:num_running_reqs{tp_rank="0"} nope\n'), Reason.PARSE),
    ],
)
async def test_a_bad_metrics_answer_fails_with_its_reason(response: httpx.Response, reason: Reason) -> None:
    src, client = source(lambda _: response, FakeClock())
    async with client:
        with pytest.raises(ScrapeError) as err:
            await src.scrape(client)
    assert err.value.reason is reason


@given(
    slot_counts,
    slot_counts,
    st.integers(-(10**4), 10**7),
    st.integers(0, 3),
    st.integers(0, 7),
)
def test_any_0_5_12_triple_gives_back_its_figures(
    available: int, evictable: int, used: int, dp: int, tp: int
) -> None:
    page = "".join(
        f'sglang:mamba_{name}_tokens{{dp_rank="{dp}",tp_rank="{tp}",pp_rank="0"}} {value}.0\n'
        for name, value in (("available", available), ("evictable", evictable), ("used", used))
    )
    gauges = parse_metrics_page(page)[Ranks(dp, tp, 0)]
    size = available + evictable + used
    expected = (
        {Pool.MAMBA: PoolAccount(Pool.MAMBA, size, available, evictable, used=used)} if size > 0 else {}
    )
    assert pool_accounts(gauges, ServerInfo(), dp) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=25), inner, max_size=5),
    max_leaves=20,
)


@given(json_values)
def test_any_server_info_document_is_read_without_failing(doc: object) -> None:
    info = parse_server_info(doc)
    assert info.full_size is None or info.full_size > 0
    assert all(size > 0 for size in info.mamba_sizes.values())


PAGE_LINES = [line for r in ("v0.5.4.post1-pd-prefill", "v0.5.9-unified", "v0.5.12-dp2-decode")
              for line in (SGLANG / f"{r}.metrics.txt").read_text().splitlines()]  # fmt: skip
cut_lines = st.tuples(st.sampled_from(PAGE_LINES), st.integers(0, 300), st.text(max_size=8)).map(
    lambda t: t[0][: t[1]] + t[2]
)


@given(st.lists(st.sampled_from(PAGE_LINES) | cut_lines | st.text(max_size=40), max_size=30))
def test_any_mangled_metrics_page_either_parses_or_is_a_parse_error(lines: list[str]) -> None:
    reason: Reason | None
    try:
        ranks = parse_metrics_page("\n".join(lines))
    except PayloadError as exc:
        reason = exc.reason
    else:
        reason = None
        for gauges in ranks.values():
            pool_accounts(gauges, ServerInfo(), 0)
            queues(gauges)
    assert reason in (None, Reason.PARSE)

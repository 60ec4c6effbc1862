"""vLLM's own /metrics as a coarse source: old (0.10.2, 0.11) and new (0.32 real, 0.34) pages, one
rank per engine, a surplus only when usage goes below zero, never an idle proof."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.sources.vllm.fakes import PAGES

from poolwatch.commands import check as check_command
from poolwatch.commands.check import as_text, check
from poolwatch.conservation import Balance, Basis, assess_snapshot, describe
from poolwatch.errors import PayloadError, Reason
from poolwatch.limits import Limits
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.sources.base import Source, Target
from poolwatch.sources.vllm.gauges import EngineGauges, pool_account
from poolwatch.sources.vllm.metrics import VllmMetricsSource, parse_metrics_page, parse_version
from rigs.fakes.clock import FakeClock

Handler = Callable[[httpx.Request], httpx.Response]


def server(page: str, version: object = None, seen: list[str] | None = None) -> Handler:
    """A fake vLLM server: ``/metrics`` and (when given) ``/version``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request.url.path)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=page)
        if request.url.path == "/version" and version is not None:
            return httpx.Response(200, json=version)
        return httpx.Response(404, json={"detail": "Not Found"})

    return handle


def page(name: str) -> str:
    return (PAGES / name).read_text()


@pytest.mark.parametrize(
    ("name", "engines", "figures"),
    [
        # (engine, usage's used count, pool size, running, waiting, preemptions, prefix queries, hits)
        ("v0.10.2.metrics.txt", [0], [(0, 1419, 27708, 14, 0, 2.0, 88210.0, 36784.0)]),
        ("v0.11.0-surplus.metrics.txt", [0], [(0, -2, 16383, 0, 0, 0.0, 1024.0, 512.0)]),
        ("v0.32.0-cpu-real.metrics.txt", [0], [(0, 0, 8191, 0, 0, 0.0, 9624.0, 8832.0)]),
        (
            "v0.34.0-dp2.metrics.txt",
            [0, 1],
            [(0, 57344, 65535, 31, 6, 3.0, 500000.0, 60000.0), (1, 0, 65535, 0, 0, 0.0, 120.0, 0.0)],
        ),
    ],
)
def test_every_releases_page_gives_one_coarse_block_pool_per_engine(
    name: str, engines: list[int], figures: list[tuple[int, int, int, int, int, float, float, float]]
) -> None:
    found = parse_metrics_page(page(name))
    assert sorted(found) == engines
    for engine, used, size, running, waiting, preemptions, queries, hits in figures:
        g = found[engine]
        assert pool_account(g) == PoolAccount(Pool.FULL, size, used=used, exactness=Exactness.COARSE)
        assert (g.running, g.waiting, g.preemptions, g.prefix_queries, g.prefix_hits) == (
            running,
            waiting,
            preemptions,
            queries,
            hits,
        )


def test_the_older_usage_name_is_read_when_the_newer_is_absent() -> None:
    text = 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
    assert parse_metrics_page(text)[0].usage == 0.5
    both = text + 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
    assert parse_metrics_page(both)[0].usage == 0.25
    newer_first = both[len(text) :] + text
    assert parse_metrics_page(newer_first)[0].usage == 0.25


@pytest.mark.parametrize(
    ("usage", "blocks", "used"),
    [
        (0.5, 11, 5),  # 0.5 of 10 blocks (block 0 is the null block)
        (0.123, 11, None),  # not a whole count of 10: the sign only, and it is not negative
        (-0.1, 11, -1),  # -1 of 10 blocks: queued once too often
        (-0.123, 11, -1),  # not whole: below zero by at least one
        (-0.001, None, -1),  # no pool size: still a certain surplus
        (0.4, None, None),
        (0.4, 1, None),  # a pool of only the null block: no size
    ],
)
def test_a_used_count_is_derived_only_when_whole_and_a_negative_usage_is_always_a_surplus(
    usage: float, blocks: int | None, used: int | None
) -> None:
    account = pool_account(EngineGauges(0, usage=usage, num_gpu_blocks=blocks))
    assert account is not None
    assert account.used == used


@given(st.integers(1, 1_000_000), st.integers(0, 1_000_000))
def test_usage_times_size_gives_back_vllms_count_of_held_blocks(size: int, held: int) -> None:
    held = min(held, size)
    account = pool_account(EngineGauges(0, usage=1 - (size - held) / size, num_gpu_blocks=size + 1))
    assert account is not None
    assert (account.size, account.used) == (size, held)


async def test_the_source_reads_every_engine_with_its_release_and_never_calls_one_idle() -> None:
    clock, seen = FakeClock(), []
    target = Target("vllm", "vllm-metrics", "http://vllm-0:8000", "vllm-0")
    source = VllmMetricsSource(target, clock)
    assert isinstance(source, Source)
    handler = server(page("v0.34.0-dp2.metrics.txt"), {"version": "0.34.0"}, seen)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        snaps = await source.scrape(client)
        clock.advance(60)
        again = await source.scrape(client)
    assert seen == ["/metrics", "/version", "/metrics"]  # the release is re-read every few minutes
    assert [s.worker.key for s in snaps] == ["vllm-0/dp0-tp0-pp0", "vllm-0/dp1-tp0-pp0"]
    busy, idle = again
    assert (busy.phase, idle.phase) == (Phase.BUSY, Phase.UNKNOWN)
    assert busy.queues == {"running": 31, "waiting": 6}
    assert {(s.worker.engine, s.worker.release, s.worker.model, s.source) for s in again} == {
        ("vllm", "0.34.0", "openai/gpt-oss-20b", "vllm-metrics")
    }
    assert [f.basis for s in again for f in assess_snapshot(s)] == [Basis.NONE, Basis.NONE]  # never a gap


async def test_a_usage_below_zero_is_a_surplus_whatever_the_phase() -> None:
    target = Target("vllm", "vllm-metrics", "http://vllm-0:8000", "vllm-0")
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(server(page("v0.11.0-surplus.metrics.txt")))
    ) as c:
        (snap,) = await VllmMetricsSource(target, FakeClock()).scrape(c)
    (finding,) = assess_snapshot(snap)
    assert (finding.balance, finding.basis, finding.gap) == (Balance.SURPLUS, Basis.NEGATIVE_USED, -2)
    assert describe((finding,)) == "full: surplus of at least 2 slots (double free)"
    assert snap.worker.release == ""  # no /version: the release stays unknown


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('vllm:kv_cache_usage_perc{engine="0" 0.5\n', Reason.PARSE),
        ("".join(f'vllm:kv_cache_usage_perc{{engine="{i}"}} 0.1\n' for i in range(3)), Reason.TOO_LARGE),
        (
            "".join(f'vllm:num_requests_running{{engine="0",x="{i}"}} 1\n' for i in range(101)),
            Reason.TOO_LARGE,
        ),
    ],
)
def test_a_bad_or_unbounded_page_is_refused_with_a_bounded_reason(text: str, reason: Reason) -> None:
    with pytest.raises(PayloadError) as info:
        parse_metrics_page(text, Limits(max_page_samples=100, max_page_ranks=2))
    assert info.value.reason is reason


async def test_a_page_without_vllm_gauges_is_a_parse_failure() -> None:
    target = Target("vllm", "vllm-metrics", "http://h:8000")
    async with httpx.AsyncClient(transport=httpx.MockTransport(server("process_cpu_seconds_total 1\n"))) as c:
        with pytest.raises(PayloadError, match="no vllm: gauges"):
            await VllmMetricsSource(target, FakeClock()).scrape(c)


def test_the_version_answer_is_read_defensively() -> None:
    assert parse_version({"version": "0.11.0"}) == "0.11.0"
    assert parse_version({"version": 11}) == ""
    assert parse_version(["0.11.0"]) == ""
    assert parse_version({"version": "x" * 500}) == ""  # not a release number: unknown
    assert parse_version({"version": "0.34.0\x1b[2J"}) == ""
    assert parse_version({"version": " 0.34.0rc1 "}) == "0.34.0rc1"


def test_an_engine_label_that_is_no_index_is_engine_zero() -> None:
    text = 'vllm:kv_cache_usage_perc{engine="1234567"} 0.1\nvllm:num_requests_running{engine="-1"} 2\n'
    assert list(parse_metrics_page(text)) == [0]


async def test_poolwatch_check_reads_a_vllm_server() -> None:
    handler = server(page("v0.11.0-surplus.metrics.txt"), {"version": "0.11.0"})
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        result = await check("http://h:8000", client, source="vllm")
    assert result.source == "vllm-metrics"
    assert result.imbalance
    assert as_text(result).splitlines() == [
        "h:8000/dp0-tp0-pp0  [vllm-metrics, unknown]  full: surplus of at least 2 slots (double free)",
        "http://h:8000: imbalance",
    ]


def test_check_says_vllm_never_proves_a_rank_idle(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    check_command.add_arguments(parser)
    parser.print_help()
    assert "vllm: never proves a rank idle" in " ".join(capsys.readouterr().out.split())

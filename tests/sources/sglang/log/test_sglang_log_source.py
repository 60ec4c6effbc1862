from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tests.helpers import FIXTURES
from tests.sources.logs import drain

from poolwatch.conservation import assess_snapshot, describe
from poolwatch.model.rank import IncidentKind, Phase, Pool, Role, SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.sglang.log.dialect import DIALECT
from rigs.fakes.clock import FakeClock

LOGS = FIXTURES / "sglang"
FAR_FUTURE = 4_000_000_000.0


@pytest.fixture
def open_log(log_source: Callable[..., LogSource]) -> Callable[..., LogSource]:
    return functools.partial(log_source, DIALECT, clock=FakeClock(FAR_FUTURE))


def summary(snaps: list[Snapshot]) -> list[tuple[str, str, list[str], str]]:
    return [
        (s.worker.key, s.phase.value, [i.kind.value for i in s.incidents], describe(assess_snapshot(s)))
        for s in snaps
    ]


async def test_the_0_5_4_post1_pd_prefill_crash_is_a_mamba_double_free_on_both_ranks(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.4.post1-pd-prefill-mamba-crash.log"), client)
    leak = "mamba: surplus of 1 slot (double free); full: balanced"
    assert summary(snaps) == [
        ("w0/dp0-tp0-pp0", "idle", ["leak_detected"], leak),
        ("w0/dp0-tp0-pp0", "unknown", ["scheduler_exception"], ""),
        ("w0/dp0-tp1-pp0", "idle", ["leak_detected"], leak),
        ("w0/dp0-tp1-pp0", "unknown", ["scheduler_exception"], ""),
    ]
    assert {s.worker.role for s in snaps} == {Role.PREFILL}  # seen on the batch lines
    assert len({s.boot_id for s in snaps}) == 1


async def test_a_restart_in_the_0_5_4_post1_log_starts_a_new_boot(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.4.post1-radix-decode-restart.log"), client)
    assert summary(snaps) == [
        ("w0/dp0-tp0-pp0", "busy", ["busy_check_failed"], "full: deficit of 10 slots (leak)"),
        ("w0/dp0-tp0-pp0", "unknown", ["scheduler_exception"], ""),
        ("w0/dp0-tp0-pp0", "busy", [], "full: unknown"),  # the latest line of the first read
        ("w0/dp0-tp0-pp0", "idle", ["leak_detected"], "full: deficit of 10 slots (leak)"),
        ("w0/dp0-tp0-pp0", "unknown", ["scheduler_exception"], ""),
    ]
    first_boot, second_boot = snaps[0].boot_id, snaps[2].boot_id
    assert first_boot != second_boot
    assert snaps[2].seq < snaps[1].seq  # sequence numbers restart with the boot


async def test_the_0_5_9_warn_mode_log_gives_each_report_and_the_tree_failure(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.9-mamba-warn.log"), client)
    kinds = [i.kind for s in snaps for i in s.incidents]
    assert kinds == [
        IncidentKind.LEAK_DETECTED,
        IncidentKind.LEAK_DETECTED,
        IncidentKind.TREE_SANITY_FAILED,
        IncidentKind.SCHEDULER_EXCEPTION,
    ]
    assert describe(assess_snapshot(snaps[0])) == "mamba: deficit of 1 slot (leak); full: balanced"
    assert describe(assess_snapshot(snaps[1])) == "req: deficit of 1 slot (leak)"


async def test_a_negative_mamba_count_on_a_0_5_9_decode_line_is_a_surplus(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.9-pd-decode.log"), client)
    last = snaps[-1]
    assert last.worker.role is Role.DECODE
    assert last.phase is Phase.BUSY
    assert last.pools[Pool.MAMBA].size == 1024
    assert last.pools[Pool.FULL].size == 1200000
    assert describe(assess_snapshot(last)) == "mamba: surplus of at least 1 slot (double free); full: unknown"
    assert dict(last.queues) == {"running": 1, "waiting": 0, "prealloc": 0, "transfer": 0, "retracted": 0}


async def test_the_0_5_12_dp_log_keeps_ranks_apart(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.12-dp-mamba-warn.log"), client)
    by_rank: dict[str, list[str]] = {}
    for key, _, incidents, verdict in summary(snaps):
        by_rank.setdefault(key, []).append(verdict or ",".join(incidents))
    assert by_rank == {
        "w0/dp1-tp0-pp0": [
            "mamba: surplus of at least 1 slot (double free); full: unknown",
            "mamba: surplus of 1 slot (double free); full: balanced",
            "req: deficit of 1 slot (leak)",
        ],
        "w0/dp0-tp0-pp0": [
            "full: unknown; mamba: unknown",
            "full: deficit of 1 slot (leak)",
            "scheduler_exception",
        ],
    }


async def test_a_configured_role_wins_over_what_the_lines_suggest(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    snaps = await drain(open_log(LOGS / "v0.5.9-pd-decode.log", role=Role.PREFILL), client)
    assert {s.worker.role for s in snaps} == {Role.PREFILL}


async def test_a_report_is_held_until_the_log_goes_quiet_or_moves_on(
    tmp_path: Path, open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    path = tmp_path / "live.log"
    path.write_text(
        "[2026-05-20 09:12:44 TP0] pool memory leak detected! [full] total=10, available=9, evictable=0, "
        "protected=0, session_held=0, uncached=0\n"
    )
    source = open_log(path)
    assert await source.scrape(client) == []  # a continuation line may still come
    with path.open("a") as out:
        out.write("[mamba] total=4, available=5, evictable=0, protected=0, session_held=0, uncached=0\n")
    assert await source.scrape(client) == []
    (snap,) = await source.scrape(client)  # nothing new: the record is whole
    assert (
        describe(assess_snapshot(snap))
        == "full: deficit of 1 slot (leak); mamba: surplus of 1 slot (double free)"
    )


async def test_lines_stamped_in_the_future_are_clamped_to_now(
    open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    source = open_log(LOGS / "v0.5.9-pd-decode.log", clock=FakeClock(1_000.0))
    snaps = await drain(source, client)
    assert snaps
    assert all(s.taken_at == 1_000.0 for s in snaps)


DECODE = "Decode batch, #running-req: 1, #token: {n}, token usage: 0.00, cuda graph: True, #queue-req: 0"


@pytest.mark.parametrize(
    ("last", "used"),
    [
        # the first line waited for the next one to show it was whole
        pytest.param(f"[2026-01-01 00:00:02 TP0] {DECODE.format(n=-2)}\n", [1, -2, 3], id="followed-whole"),
        # cut: the writer died mid-line
        pytest.param(f"[2026-01-01 00:00:02 TP0] {DECODE.format(n=-4)}"[:-20], [1, 3], id="cut-never-read"),
    ],
)
async def test_a_rotated_log_is_followed_without_losing_lines_and_its_cut_last_line_never_read(
    last: str, used: list[int], tmp_path: Path, open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    path = tmp_path / "sglang.log"
    path.write_text(f"[2026-01-01 00:00:01 TP0] {DECODE.format(n=1)}\n")
    source = open_log(path)
    await source.scrape(client)
    with path.open("a") as out:
        out.write(last)
    path.rename(tmp_path / "sglang.log.1")
    path.write_text(f"[2026-01-01 00:00:03 TP0] {DECODE.format(n=3)}\n")
    snaps = await source.scrape(client) + await source.scrape(client) + await source.scrape(client)
    assert [s.pools[Pool.FULL].used for s in snaps] == used


LEAK_HEAD = (
    "token_to_kv_pool_allocator memory leak detected! full_available_size=6016, full_evictable_size=390685, "
    "self.token_to_kv_pool_allocator.size=396701, self.tree_cache.full_protected_size()=0"
)
LEAK_MAMBA = (
    "mamba_available_size=317, mamba_evictable_size=138, self.req_to_token_pool.mamba_pool.size=454, "
    "self.tree_cache.mamba_protected_size()=0"
)


async def test_a_report_that_arrives_after_the_log_went_quiet_is_still_read_and_kept_on_its_rank(
    tmp_path: Path, open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    path = tmp_path / "live.log"
    path.write_text(
        "(SGLangEngine pid=9) \x1b[31m[2026-01-12 10:57:43 TP3]\x1b[0m Scheduler hit an exception: "
        "Traceback (most recent call last):\n"
    )
    source = open_log(path)
    await drain(source, client)  # the crash line alone, flushed when the log went quiet
    with path.open("a") as out:
        out.write('(SGLangEngine pid=9)   File "scheduler.py", line 1\r\n')
        out.write(f"(SGLangEngine pid=9) ValueError: {LEAK_HEAD}\n")
        out.write(f"(SGLangEngine pid=9) \x1b[1m{LEAK_MAMBA}\x1b[0m\n")
    (snap,) = await drain(source, client)
    assert snap.worker.tp_rank == 3
    assert [i.kind for i in snap.incidents] == [IncidentKind.LEAK_DETECTED]
    assert describe(assess_snapshot(snap)) == "mamba: surplus of 1 slot (double free); full: balanced"


async def test_a_line_is_read_only_once_its_newline_is_written(
    tmp_path: Path, open_log: Callable[..., LogSource], client: httpx.AsyncClient
) -> None:
    path = tmp_path / "live.log"
    path.write_text(f"[2026-01-12 10:57:43 TP0] {LEAK_HEAD}\n{LEAK_MAMBA.replace('size=454', 'size=45')}")
    source = open_log(path)
    first = await drain(source, client)
    assert [describe(assess_snapshot(s)) for s in first] == ["full: balanced"]  # mamba's line is unfinished
    with path.open("a") as out:
        out.write("4, more=1\n[2026-01-12 10:57:44 TP0] next\n")
    assert await source.scrape(client) == []  # the finished line continues nothing: it starts a record
    tail = await drain(source, client)
    assert "surplus" not in " ".join(describe(assess_snapshot(s)) for s in first + tail)


def decode_line(tp: int, second: int = 10) -> str:
    return (
        f"[2026-03-02 14:05:{second:02d} TP{tp}] Decode batch [1290], #running-req: 12, #full token: 20480, "
        "full token usage: 0.02, #queue-req: 0\n"
    )


async def test_one_log_names_at_most_max_log_ranks_and_the_first_drop_is_logged(
    tmp_path: Path, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "sglang.log"  # issue 24 item 7: 20,000 TP tags once cost 653 MB
    log.write_text("".join(decode_line(tp) for tp in range(3000)))
    source = LogSource(
        Target("log", SourceKind("sglang-log"), str(log), "w0"), FakeClock(FAR_FUTURE), DIALECT, max_ranks=100
    )
    try:
        snaps = await drain(source, client)
    finally:
        source.close()
    assert len({s.worker.key for s in snaps}) == 100
    assert [r for r in caplog.records if "event=log_ranks_capped" in r.message]


def test_a_rank_silent_long_enough_gives_its_place_and_a_new_boot_forgets_all() -> None:
    from poolwatch.sources.logfile.events import Figures, PoolSize
    from poolwatch.sources.logfile.fold import RANK_IDLE_S, LogFold
    from poolwatch.sources.logfile.heads import Ranks

    fold = LogFold("w0", max_ranks=2, engine="sglang", source=SourceKind("sglang-log"))
    batch = lambda tp, at: Figures(at, Ranks(0, tp, 0), "decode")  # noqa: E731
    assert fold.apply(batch(0, 0.0)) is not None
    assert fold.apply(batch(1, 1.0)) is not None
    assert fold.apply(batch(2, 2.0)) is None  # both others spoke lately: dropped
    assert fold.dropped == 1
    assert fold.apply(batch(2, RANK_IDLE_S + 1)) is not None  # TP0 was silent long enough
    assert fold.apply(batch(0, RANK_IDLE_S + 2)).seq == 1  # a new TP0 in TP1's place: counted afresh
    assert fold.apply(batch(1, RANK_IDLE_S + 3)) is None  # TP2 and TP0 spoke lately
    fold.apply(PoolSize(RANK_IDLE_S + 4, Ranks(0, 5, 0), Pool.FULL, 1000, boot=True))  # a new start
    assert fold.apply(batch(6, RANK_IDLE_S + 5)) is not None  # TP5 and TP6: the old ones forgotten
    assert fold.dropped == 2

"""Real logs that tripped the replay (issue 34), each from an excerpt written in its shape.

* rank headers without a time (``[TP5 EP5] ...``: a logging format without ``%(asctime)s``)
  credited the crash to rank 0 (the line was read as a continuation of rank 0's record);
* a batch line whose first characters are damaged was dropped without a word;
* a lone leak report inside a traceback (no prefixed line at all) was given to rank 0;
* fields cut off a wrapped line read as 0, so a cut ``full_evictable_size`` made a false leak;
* a time-of-day-only log was stamped with the file's (today's) date.

Unknown stays unknown: a rank no line proves is ``unattributed``, a figure no line states is
``None``, a date no line gives is not printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path

import pytest
from tests.sources.logs import events

from poolwatch.commands.replay import command as replay_command
from poolwatch.model.rank import Pool
from poolwatch.sources.logfile.events import Figures, RankIncident
from poolwatch.sources.logfile.replay import UNATTRIBUTED, ReplayReport, Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch.sources.sglang.log.leak_message import parse_leak_figures
from rigs.log_records import records

SCHEDULER = '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py"'
TRACEBACK = [
    f"{SCHEDULER}, line 2797, in run_scheduler_process",
    "    scheduler.event_loop_overlap()",
    f"{SCHEDULER}, line 1012, in event_loop_overlap",
    "    self.self_check_during_idle()",
]
LEAK = [
    "ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size=1663695, "
    "full_evictable_size=1066, self.token_to_kv_pool_allocator.size=1664761, "
    "self.tree_cache.full_protected_size()=0",
    "mamba_available_size=473, mamba_evictable_size=4, self.req_to_token_pool.mamba_pool.size=476, "
    "self.tree_cache.mamba_protected_size()=0",
]
DECODE = (
    "Decode batch [{it}], #running-req: 4, #full token: {used}, full token usage: 0.00, mamba num: 8, "
    "mamba usage: 0.02, cuda graph: True, gen throughput (token/s): 210.55, #queue-req: 0"
)
MARKER = "token_to_kv_pool_allocator memory leak detected!"
MAMBA_SURPLUS = "mamba: surplus of 1 slot (double free)"


def replayed(lines: list[str]) -> tuple[ReplayReport, list[Row]]:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "decode-0", rows.append, every=0)
    replayer.feed(lines)
    return replayer.finish(), rows


def test_a_crash_under_rank_headers_without_a_time_is_the_named_ranks_not_rank_0s() -> None:
    log = [
        f"[TP0 EP0] {DECODE.format(it=5100, used=2048)}",
        f"[TP5 EP5] {DECODE.format(it=5100, used=2048)}",
        "[TP5 EP5] Scheduler hit an exception: Traceback (most recent call last):",
        *TRACEBACK,
        *LEAK,
        f"[TP0 EP0] {DECODE.format(it=5101, used=2050)}",
    ]
    report, rows = replayed(log)
    incidents = {(r.rank, r.event) for r in rows if r.event not in ("decode", "batches")}
    assert incidents == {("dp0-tp5-pp0", "leak_detected"), ("dp0-tp5-pp0", "scheduler_exception")}
    assert report.first_problem is not None
    assert report.first_problem.rank == "dp0-tp5-pp0"  # before: dp0-tp0-pp0, a rank that was fine
    assert report.first_problem.verdict.startswith(MAMBA_SURPLUS)


def test_rank_headers_without_a_time_take_the_last_time_seen() -> None:
    head = "[2025-11-03 09:14:06 TP0] " + DECODE.format(it=1, used=10)
    found = records(DIALECT, [head, "[TP5 EP5] Scheduler hit an exception: boom"])
    assert [(r.ranks.tp if r.ranks else None, r.at) for r in found] == [(0, found[0].at), (5, found[0].at)]


def test_a_batch_line_whose_start_is_damaged_is_read_by_its_fields_and_counted() -> None:
    log = [
        f"[2025-11-03 09:14:07 TP0] {DECODE.format(it=1203, used=2048)}",
        "[2025-11-03 09:14:07 TP1] \ufffd\ufffdcode batch [1203], #running-req: 4, #full token: -3, "
        "full token usage: 0.00, mamba num: 8, mamba usage: 0.02, #queue-req: 0",
        f"[2025-11-03 09:14:08 TP0] {DECODE.format(it=1204, used=2050)}",
    ]
    report, rows = replayed(log)
    assert report.damaged == 1  # before: no word of it
    assert [(r.rank, r.event, r.figures.get(Pool.FULL)) for r in rows if r.rank == "dp0-tp1-pp0"] == [
        ("dp0-tp1-pp0", "decode", "-3")
    ]
    assert report.first_problem is not None
    assert report.first_problem.rank == "dp0-tp1-pp0"
    assert report.first_problem.verdict.startswith("full: surplus of at least 3 slots")


def test_a_batch_line_whose_prefix_is_cut_keeps_the_ranks_it_still_names_else_no_rank() -> None:
    log = [
        f"[2025-11-03 09:14:07 TP0] {DECODE.format(it=1203, used=2048)}",
        f"5-11-03 09:14:08 TP3] {DECODE.format(it=1204, used=-2)}",  # the line's first bytes lost
        f"\x00\ufffd\ufffd:08 T\ufffd {DECODE.format(it=1205, used=-7)}",  # its ranks lost too
        f"[2025-11-03 09:14:09 TP0] {DECODE.format(it=1206, used=2050)}",
    ]
    report, rows = replayed(log)
    assert report.damaged == 2
    assert report.damaged_unread == 1
    assert {r.rank for r in rows} == {"dp0-tp0-pp0", "dp0-tp3-pp0"}
    assert [r.figures[Pool.FULL] for r in rows if r.rank == "dp0-tp0-pp0"] == ["2048", "2050"]  # no -7
    assert report.first_problem is not None
    assert report.first_problem.rank == "dp0-tp3-pp0"


def test_a_lone_leak_report_inside_a_traceback_stays_unattributed() -> None:
    log = ["Traceback (most recent call last):", *TRACEBACK, *LEAK]  # no prefixed line at all
    report, rows = replayed(log)
    assert [(r.rank, r.event) for r in rows] == [(UNATTRIBUTED, "leak_detected")]  # before: dp0-tp0-pp0
    assert report.unattributed == 1
    assert report.ranks == set()
    assert report.first_problem is not None
    assert report.first_problem.rank == UNATTRIBUTED
    assert report.first_problem.verdict.startswith(MAMBA_SURPLUS)


def test_a_lone_report_in_the_prefixless_0_1_format_keeps_its_old_stamping() -> None:
    log = [
        "/usr/lib/python3/dist-packages/sglang/srt/managers/router/model_rpc.py:303: UserWarning: "
        "Warning: available_size=9, max_total_num_token=12",
        "KV cache pool leak detected!",
        "  warnings.warn(",
    ]
    report, rows = replayed(log)
    assert [r.rank for r in rows] == ["dp0-tp0-pp0"]  # 0.1.x named no ranks: its one rank is rank 0
    assert report.unattributed == 0


WRAPPED = [  # CRI split the long report into a partial (P) and a final (F) record mid-field
    "2025-11-03T09:14:07.100000000Z stderr F [2025-11-03 09:14:07 TP0] Scheduler hit an exception: "
    "Traceback (most recent call last):",
    *(f"2025-11-03T09:14:07.100000000Z stderr F {line}" for line in TRACEBACK),
    "2025-11-03T09:14:07.100000000Z stderr P ValueError: token_to_kv_pool_allocator memory leak detected! "
    "full_available_size=1663695, full_evict",
    "2025-11-03T09:14:07.100000000Z stderr F able_size=1066, self.token_to_kv_pool_allocator.size=1664761, "
    "self.tree_cache.full_protected_size()=0",
    f"2025-11-03T09:14:07.100000000Z stderr F {LEAK[1]}",
]


def test_a_report_split_by_a_collector_is_joined_back_whole() -> None:
    report, rows = replayed(WRAPPED)
    (leak,) = [r for r in rows if r.event == "leak_detected"]
    assert leak.figures[Pool.FULL] == "0"  # before: evictable read as 0, "full: deficit of 1066 slots"
    assert report.first_problem is not None
    assert report.first_problem.verdict == "mamba: surplus of 1 slot (double free); full: balanced"
    assert report.assembly.rejoined["partial"] == 1


def test_a_field_cut_off_a_line_whose_rest_is_lost_is_unknown_not_0() -> None:
    lost = [line for line in WRAPPED if " stderr F able_size" not in line]  # the F record never came
    report, rows = replayed(lost)
    (leak,) = [r for r in rows if r.event == "leak_detected"]
    assert Pool.FULL not in leak.figures  # its evictable, size and protected are gone: unknown
    assert report.first_problem is not None
    assert report.first_problem.verdict == "mamba: surplus of 1 slot (double free)"
    (incident,) = [
        e.incident for e in events(DIALECT, lost) if isinstance(e, RankIncident) and e.incident.pools
    ]
    assert all(a.pool is not Pool.FULL for a in incident.pools)  # no size, no account: unknown


@pytest.mark.parametrize(
    "wrapped",
    [
        [
            "token_to_kv_pool_allocator memory leak detected! full_available_size=166",
            "3695, " + LEAK[0][-120:],
        ],
        ["token_to_kv_pool_allocator memory leak detected! full_available_size=", "1663695, x=1"],
    ],
)
def test_a_number_cut_by_a_wrap_is_never_read_as_a_smaller_one(wrapped: list[str]) -> None:
    pools = {a.pool: a for a in parse_leak_figures(wrapped)}
    assert Pool.FULL not in pools or pools[Pool.FULL].available != 166


def test_a_report_split_at_its_own_line_break_is_whole_and_read_as_before() -> None:
    pools = {a.pool: a for a in parse_leak_figures([LEAK[0].removeprefix("ValueError: "), LEAK[1]])}
    assert (pools[Pool.FULL].evictable, pools[Pool.FULL].held, pools[Pool.FULL].unreadable) == (1066, 0, ())
    assert pools[Pool.MAMBA].available == 473


TIME_OF_DAY = [  # 0.2.x: "%H:%M:%S" only, across midnight
    "[23:59:58 TP0] Decode batch. #running-req: 3, #token: 3120, token usage: 0.04, "
    "gen throughput (token/s): 301.22, #queue-req: 0",
    "[00:00:04 TP0] Decode batch. #running-req: 1, #token: -1, token usage: 0.01, "
    "gen throughput (token/s): 88.10, #queue-req: 0",
]


def replay_file(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    parser = argparse.ArgumentParser()
    replay_command.add_arguments(parser)
    replay_command.run(parser.parse_args([str(path), "--every", "0", *extra]))
    return capsys.readouterr().out


def test_a_time_of_day_only_log_is_shown_by_its_times_of_day_never_a_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(TIME_OF_DAY) + "\n")
    os.utime(log, (dt.datetime(2024, 3, 5, 12).timestamp(),) * 2)
    table = replay_file(log, capsys)
    for date in ("2024-03-05", "2024-03-06", dt.date.today().isoformat(), "2000-01-0"):
        assert date not in table  # before: the file's date (today's, for a fresh copy)
    assert [line.split("  ")[0] for line in table.splitlines()[1:3]] == ["23:59:58", "day 2 00:00:04"]
    assert table.rstrip().endswith(
        "first problem: day 2 00:00:04 dp0-tp0-pp0 (decode): full: surplus of at least 1 slot (double free)"
    )
    doc = json.loads(replay_file(log, capsys, "--json"))
    times = [(r["at"], r["time_of_day"]) for r in doc["timeline"]]
    assert times == [(None, "23:59:58"), (None, "day 2 00:00:04")]
    assert doc["first_problem"]["at"] is None


def test_a_dated_log_keeps_its_dates() -> None:
    _, rows = replayed([f"[2025-11-03 09:14:07 TP0] {DECODE.format(it=1, used=5)}"])
    assert [r.dated for r in rows] == [True]
    assert dt.date.fromtimestamp(rows[0].at) == dt.date(2025, 11, 3)


def test_a_damaged_looking_line_in_a_log_without_prefixes_is_a_plain_batch_line() -> None:
    line = "new fill batch. #seq: 1. #cached_token: 0. #new_token: 9. #remaining_req: 0. #running_req: 0"
    (batch,) = events(DIALECT, [line])
    assert isinstance(batch, Figures)
    assert (batch.kind, batch.damaged) == ("prefill", False)  # the 0.1.x head is read as before

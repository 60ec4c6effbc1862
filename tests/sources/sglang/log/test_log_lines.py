from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import encodable_text

from poolwatch.sources.logfile.assembler import LineAssembler
from poolwatch.sources.logfile.heads import Head, Ranks
from poolwatch.sources.logfile.records import LogRecord, RecordAssembler
from poolwatch.sources.sglang.log.dialect import DIALECT


def local(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()


def parse_line(line: str) -> Head | None:
    """The prefix SGLang's dialect reads off one line, collectors' prefixes taken off first."""
    lines = LineAssembler(DIALECT.reader(None), DIALECT.wraps)
    (logical,) = [*lines.feed(line), *lines.flush()]
    return logical.head


class Feeder:
    """SGLang's lines through the line assembler and the record assembler, as the product runs them."""

    def __init__(self, day: dt.date | None = None, **bounds: int) -> None:
        self._lines = LineAssembler(DIALECT.reader(day), DIALECT.wraps)
        self.records = RecordAssembler(DIALECT.framing, **bounds)

    @property
    def pending(self) -> bool:
        return self.records.pending

    def feed(self, line: str) -> list[LogRecord]:
        return [r for lg in self._lines.feed(line) for r in self.records.feed(lg.text, lg.head)]

    def flush(self, *, final: bool = True) -> list[LogRecord]:
        done = [r for lg in self._lines.flush() for r in self.records.feed(lg.text, lg.head)]
        return done + self.records.flush(final=final)


@pytest.mark.parametrize(
    ("line", "ranks", "fraction", "message"),
    [
        ("[2025-10-31 10:40:43 TP0] Prefill batch, x", Ranks(0, 0, 0), 0.0, "Prefill batch, x"),
        ("[2025-10-31 10:40:43 TP1] hello", Ranks(0, 1, 0), 0.0, "hello"),
        ("[2025-10-31 10:40:43] INFO:     Started", Ranks(0, 0, 0), 0.0, "INFO:     Started"),
        ("[2025-10-31 10:40:43.250 DP1 TP3] m", Ranks(1, 3, 0), 0.25, "m"),
        ("[2025-10-31 10:40:43 DP1 PP2 ATTN_CP0 MOE_DP1 TP3 EP3] m", Ranks(1, 3, 2), 0.0, "m"),
        ("[2025-10-31 10:40:43 DP0 TP0 EP0 PP1] m\n", Ranks(0, 0, 1), 0.0, "m"),
    ],
)
def test_the_prefix_of_every_release_names_time_and_ranks(
    line: str, ranks: Ranks, fraction: float, message: str
) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.ranks == ranks
    assert parsed.at == pytest.approx(local("2025-10-31 10:40:43") + fraction)
    assert parsed.message == message


@pytest.mark.parametrize(
    "line",
    [
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2797',
        "mamba_available_size=473, mamba_evictable_size=4",
        "[2025-13-45 99:99:99 TP0] impossible date",
        "[EP0] an expert rank alone is no scheduler prefix",
        "[INFO] a bracketed word",
        "[W123] a bracketed code",
        "",
    ],
)
def test_lines_without_a_valid_prefix_are_continuations(line: str) -> None:
    assert parse_line(line) is None


def test_a_record_is_its_prefixed_line_and_the_unprefixed_lines_after_it() -> None:
    assembler = Feeder()
    lines = [
        "[2025-10-31 10:40:43 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "  File x",
        "ValueError: boom",
        "[2025-10-31 10:40:44] next",
        "[2025-10-31 10:40:45] after",
    ]
    done = [r for line in lines for r in assembler.feed(line)]  # each line is read once the next shows up
    assert [r.lines for r in done] == [
        ("Scheduler hit an exception: Traceback (most recent call last):", "  File x", "ValueError: boom")
    ]
    assert assembler.pending
    assert [r.message for r in assembler.flush()] == ["next", "after"]
    assert not assembler.pending


def test_lines_past_a_records_bound_start_a_headless_record_with_its_time_and_ranks() -> None:
    assembler = Feeder(max_lines=3, max_chars=1000)
    assembler.feed("[2025-10-31 10:40:43 TP1] head")
    done: list[LogRecord] = []
    for i in range(10):
        done += assembler.feed(f"line {i}")
    done += assembler.flush()
    assert [r.lines for r in done] == [
        ("head", "line 0", "line 1", "line 2"),
        ("line 3", "line 4", "line 5", "line 6"),
        ("line 7", "line 8", "line 9"),
    ]
    assert {(r.at, r.ranks) for r in done} == {(local("2025-10-31 10:40:43"), Ranks(0, 1, 0))}
    assert [r.headless for r in done] == [False, True, True]
    assert assembler.records.overflowed == 2


def test_lines_before_any_prefixed_line_form_a_headless_record() -> None:
    assembler = Feeder()
    assert assembler.feed("ValueError: orphan") == []
    (record,) = assembler.flush()
    assert (record.message, record.headless, record.ranks) == ("ValueError: orphan", True, Ranks())


@given(st.lists(st.text(max_size=200), max_size=50))
def test_assembling_any_text_never_fails_and_keeps_records_bounded(lines: list[str]) -> None:
    assembler = Feeder(max_lines=5, max_chars=300)
    records: list[LogRecord] = []
    for line in lines:
        records += assembler.feed(line)
    records += assembler.flush()
    for record in records:
        assert len(record.continuation) <= 5
        assert sum(len(c) for c in record.continuation) <= 300


@given(
    st.datetimes(min_value=dt.datetime(2001, 1, 1), max_value=dt.datetime(2099, 1, 1)),
    st.integers(0, 7),
    st.integers(0, 63),
    st.integers(0, 3),
    encodable_text(80, exclude="\r\n\x1b"),
)
def test_any_prefix_sglang_can_write_parses_back(
    when: dt.datetime, dp: int, tp: int, pp: int, message: str
) -> None:
    stamp = when.strftime("%Y-%m-%d %H:%M:%S")
    parsed = parse_line(f"[{stamp} DP{dp} PP{pp} TP{tp}] {message}")
    assert parsed is not None
    assert parsed.ranks == Ranks(dp, tp, pp)
    assert parsed.message == message


@pytest.mark.parametrize(
    ("line", "ranks", "message"),
    [
        ("(SGLangEngine pid=4242) [2025-10-31 10:40:43 TP1] m", Ranks(0, 1, 0), "m"),
        ("(SGLangEngine pid=7, ip=10.0.0.3) [2025-10-31 10:40:43 DP1 TP1] m", Ranks(1, 1, 0), "m"),
        ("2025-10-31T10:40:43.123456789Z stdout F [2025-10-31 10:40:43 TP2] m", Ranks(0, 2, 0), "m"),
        ("2025-10-31T10:40:43.5Z INFO [2025-10-31 10:40:43 TP0] m", Ranks(), "m"),
        ("   [2025-10-31 10:40:43 TP3] m", Ranks(0, 3, 0), "m"),
        ("\x1b[32m[2025-10-31 10:40:43 TP1]\x1b[0m m\r\n", Ranks(0, 1, 0), "m"),
        ("[2025-10-31 10:40:43 TP1] \x1b[1mm\x1b[0m", Ranks(0, 1, 0), "m"),
        ("2025-10-31 10:40:43,000 INFO 4242 [scheduler.py:812] m", Ranks(), "m"),
        ("2025-10-31 10:40:43 WARNING 17 [common.py:4060] m", Ranks(), "m"),
        ("\x00\x00[2025-10-31 10:40:43 TP0] m", Ranks(), "m"),
    ],
)
def test_what_launchers_and_collectors_add_before_the_prefix_is_tolerated(
    line: str, ranks: Ranks, message: str
) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    assert (parsed.at, parsed.ranks, parsed.message) == (local("2025-10-31 10:40:43"), ranks, message)


@pytest.mark.parametrize(
    "line",
    [
        "[2025-10-31 10:40:43 TP" + "7" * 5000 + "] a rank tag of 5,000 digits",
        "[2025-10-31 10:40:43" + " TP1" * 13 + "] more tags than any release writes",
        "(SGLangEngine pid=4242) mamba_available_size=473, mamba_evictable_size=4",
        "[swa] total=65536, available=65537, evictable=0",
    ],
)
def test_lines_that_only_look_like_a_prefix_are_continuations(line: str) -> None:
    assert parse_line(line) is None


def test_a_0_2_time_of_day_prefix_is_dated_and_crosses_midnight() -> None:
    assembler = Feeder(day=dt.date(2024, 8, 31))
    done: list[LogRecord] = []
    for line in [
        "[23:59:59 TP0] one",
        "[00:00:01 TP0] two",
        "[2024-09-01 00:00:02] three",
        "[00:00:03 TP0] four",
    ]:
        done += assembler.feed(line)
    done += assembler.flush()
    assert [r.at for r in done] == [
        local("2024-08-31 23:59:59"),
        local("2024-09-01 00:00:01"),
        local("2024-09-01 00:00:02"),
        local("2024-09-01 00:00:03"),
    ]


def test_another_ranks_line_inside_a_traceback_is_its_own_record_and_the_traceback_goes_on() -> None:
    assembler = Feeder()
    lines = [
        "[2025-10-31 10:40:43 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "scheduler.py", line 1, in run',
        "[2025-10-31 10:40:43 TP1] Decode batch, #running-req: 1",
        "ValueError: pool memory leak detected! [full] total=10, available=11",
        "[swa] total=4, available=4",
        "[2025-10-31 10:40:44 TP1] after",
    ]
    done = [r for line in lines for r in assembler.feed(line)] + assembler.flush()
    assert [(r.ranks.tp if r.ranks else None, r.lines) for r in done] == [
        (1, ("Decode batch, #running-req: 1",)),
        (0, (lines[0][26:], lines[1], lines[3], lines[4])),
        (1, ("after",)),
    ]


def test_continuation_lines_lose_their_actor_prefix_and_colour_but_keep_their_indentation() -> None:
    assembler = Feeder()
    assembler.feed("(SGLangEngine pid=1) [2025-10-31 10:40:43 TP0] Scheduler hit an exception: Traceback")
    assembler.feed('(SGLangEngine pid=1)   File "x.py", line 3\r')
    assembler.feed("(SGLangEngine pid=1) \x1b[31mValueError\x1b[0m: boom")
    (record,) = assembler.flush()
    assert record.continuation == ('  File "x.py", line 3', "ValueError: boom")


def test_another_ranks_report_inside_a_traceback_keeps_its_own_lines() -> None:
    assembler = Feeder()
    lines = [
        "[2025-10-31 10:40:43 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "scheduler.py", line 1, in run',
        "[2025-10-31 10:40:43 TP1] pool memory leak detected! [full] total=10, available=10, evictable=0",
        "[swa] total=4, available=5, evictable=0",
    ]
    done = [r for line in lines for r in assembler.feed(line)] + assembler.flush()
    assert [(r.ranks.tp if r.ranks else None, len(r.lines)) for r in done] == [(0, 2), (1, 2)]

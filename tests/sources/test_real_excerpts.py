"""Real log excerpts from public issue threads (``tests/fixtures/real-logs``, each with its thread in
SOURCES.md) replay to what they hold: whose log it is, the ranks that crashed, the pool errors named
with the bugs they match, the first problem and the exit code.  Never a false alarm on a healthy
excerpt, never a wrong sign, never a crash of the replay."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.helpers import FIXTURES
from tests.sources.logs import file_lines, replay_cli, replayed

from poolwatch.model.rank import Pool
from poolwatch.sources.engine import sniff_engine
from poolwatch.sources.sglang.log.dialect import DIALECT as SGLANG
from poolwatch.sources.vllm.log.dialect import DIALECT as VLLM

REAL = FIXTURES / "real-logs"


@dataclass(frozen=True)
class Case:
    name: str
    engine: str
    code: int
    crashes: frozenset[str] = frozenset()  # the ranks with a scheduler_exception row
    errors: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (class, bugs) of every pool error named, in order
    last: str = ""  # a part of the summary's last line
    more: dict[str, object] = field(default_factory=dict)


CASES = (
    Case("vllm-23534-enginecore-n-tqdm.log", "vllm", 1, frozenset({"dp1-tp0-pp0", "dp3-tp0-pp0"})),
    Case("vllm-25482-enginecore-0.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-17276-untagged-padded.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-43884-lost-bracket.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-18115-glued-stats.log", "vllm", 0, last="no accounting problem found"),
    Case("vllm-1361-preemption-only.log", "vllm", 0, last="6 lines carry vLLM's own marks"),
    Case("vllm-20495-vllmworker-tp.log", "vllm", 0, last="6 lines carry vLLM's own marks"),
    Case("vllm-3359-docker-timestamps.log", "vllm", 0, last="no accounting problem found"),
    Case("vllm-3343-torchserve-host-format.log", "vllm", 0, last="no accounting problem found"),
    Case("vllm-2047-journald.log", "vllm", 0, last="12 lines carry vLLM's own marks"),
    Case("vllm-1772-unrecognized-request.log", "vllm", 0, errors=(("stranded", ("V04",)),)),
    Case("vllm-25562-expired-blocks.log", "vllm", 0, errors=(("stranded", ("V05",)),) * 5),
    Case("vllm-81-reset-prefix-cache.log", "vllm", 0, errors=(("stranded", ("V13", "V02", "V05")),)),
    Case("vllm-3310-enginecore-hit-an-exception.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-2306-engine-dead.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-2306-fatal.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-28411-dump-input.log", "vllm", 1, frozenset({"dp0-tp0-pp0"})),
    Case("vllm-9342-v0-preempted.log", "vllm", 0, last="9 lines carry vLLM's own marks"),
    Case("vllm-22430-nested-ray.log", "vllm", 0, last="6 lines carry vLLM's own marks"),
    Case("vllm-391-stats-and-access.log", "vllm", 0, last="no accounting problem found"),
    Case(
        "sglang-27789-swa-busy-check.log",
        "sglang",
        1,
        errors=(("double free", ("S07",)),),
        last="unattributed (busy_check_failed): swa: surplus of 256 slots (double free)",
    ),
    Case(
        "sglang-36081-tp6-ep6.log",
        "sglang",
        1,
        frozenset({"dp0-tp6-pp0"}),
        (("leak", ()),),
        "unattributed (leak_detected): swa: deficit of 256 slots (leak); full: balanced",
    ),
    Case(
        "sglang-16067-leaked-mamba-pages.log",
        "sglang",
        1,
        frozenset({"dp0-tp3-pp0"}),
        (("leak", ("S04", "S05", "S03")),),
        "mamba: deficit of 1 slot (leak); full: balanced",
    ),
    Case(
        "sglang-6888-available-above-total.log",
        "sglang",
        1,
        errors=(("double free", ("S22",)),),
        last="full: surplus of 4224 slots (double free)",
    ),
    Case("sglang-11970-decode-batches.log", "sglang", 1, frozenset({"dp0-tp0-pp0"})),
    Case(
        "sglang-11970-report.log",
        "sglang",
        1,
        errors=(("leak", ("S02", "S10")),),
        last="full: deficit of 59 slots (leak)",
    ),
    Case(
        "sglang-semipd17-userwarning.log",
        "sglang",
        1,
        errors=(("leak", ()), ("leak", ("S23",))),
        last="full: deficit of 7 slots (leak)",
    ),
    Case(
        "sglang-27666-wrapped-and-cut.log",
        "sglang",
        1,
        errors=(("counter", ("S13",)),),
        last="counter (full): protected<0",
    ),
    Case(
        "sglang-34823-abbreviated-report.log",
        "sglang",
        1,
        errors=(("double free", ("S09",)),),
        last="full: surplus of at least 7680 slots (double free); swa: surplus of at least 512 slots",
    ),
    Case("sglang-21404-host-format.log", "sglang", 1, frozenset({"dp0-tp0-pp0"})),
    Case("sglang-22248-pp-rank.log", "sglang", 1, frozenset({"dp0-tp1-pp1"})),
    Case("sglang-20010-sigquit.log", "sglang", 1, frozenset({"dp0-tp0-pp0"})),
    Case(
        "sglang-38519-swa-over-free.log",
        "sglang",
        1,
        errors=(("double free", ("S08", "S07")),),
        last="(allocator assert): double free (swa)",
    ),
    Case("sglang-20185-bare-header.log", "sglang", 1, frozenset({"dp0-tp0-pp0"})),
)


def run(capsys: pytest.CaptureFixture[str], name: str) -> tuple[int, dict[str, object], str]:
    code, out, _ = replay_cli(capsys, REAL / name, "--json")
    _, table, _ = replay_cli(capsys, REAL / name)
    return code, json.loads(out), table


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_real_excerpt_replays_to_what_it_holds(capsys: pytest.CaptureFixture[str], case: Case) -> None:
    code, doc, table = run(capsys, case.name)
    assert (code, doc["engine"]) == (case.code, case.engine)
    timeline = doc["timeline"]
    assert isinstance(timeline, list)
    crashes = {r["rank"] for r in timeline if r["event"] == "scheduler_exception"}
    assert crashes == case.crashes
    named = [(r["error"]["class"], tuple(r["error"]["bugs"])) for r in timeline if r["error"]]
    assert named == list(case.errors)
    assert case.last in table.rstrip().splitlines()[-1]


def test_every_excerpt_is_tested_and_names_its_thread() -> None:
    names = {p.name for p in REAL.iterdir() if p.suffix == ".log"}
    assert names == {c.name for c in CASES}
    sources = (REAL / "SOURCES.md").read_text()
    for name in names:
        row = next(line for line in sources.splitlines() if f"`{name}`" in line)
        assert "https://github.com/" in row
    assert sum(c.engine == "vllm" for c in CASES) > sum(c.engine == "sglang" for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_whose_log_each_is_told_by_its_own_lines(case: Case) -> None:
    found = sniff_engine(file_lines(REAL / case.name))
    if case.name == "sglang-38519-swa-over-free.log":
        assert found is None  # a traceback fragment carries no engine's marks: the default reads it
        return
    assert found is not None
    assert found[0].engine == case.engine
    assert found[1].first is not None  # the evidence names the line that decided it


# -- the cases, each from a real excerpt --------------------------------------------------


def wrap(lines: list[str], width: int) -> list[str]:
    """What a terminal ``width`` columns wide shows: each line cut every ``width`` characters."""
    return [line[i : i + width] for line in lines for i in range(0, max(len(line), 1), width)]


@pytest.mark.parametrize(
    "width", [50, 60, 80, 97, 120, 133, 160]
)  # a terminal narrower cuts the prefix thrice
def test_a_wrapped_statistics_line_is_read_whole(width: int) -> None:
    lines = file_lines(REAL / "vllm-3359-docker-timestamps.log")  # kubectl/docker logs in a narrow terminal
    _, whole = replayed(VLLM, lines)
    report, rows = replayed(VLLM, wrap(lines, width))
    assert [(r.figures, r.running, r.waiting) for r in rows] == [
        (r.figures, r.running, r.waiting) for r in whole
    ]
    assert [r.figures[Pool.FULL] for r in rows] == ["62.8%", "68.8%", "74.5%", "79.9%"]
    assert report.assembly.rejoined["wrap"] > 0
    assert sniff_engine(wrap(lines, width)) is not None  # still told vLLM's, not SGLang's


def test_a_line_without_its_bracket_is_read() -> None:
    report, rows = replayed(VLLM, file_lines(REAL / "vllm-43884-lost-bracket.log"))
    stats = [r for r in rows if r.event == "stats"]
    assert [(s.figures, s.running, s.waiting) for s in stats] == [({Pool.FULL: "0.0%"}, 0, 0)]
    assert report.incidents == {"scheduler_exception": 1}


def test_enginecore_n_names_its_rank_not_engine_0() -> None:
    _, rows = replayed(VLLM, file_lines(REAL / "vllm-23534-enginecore-n-tqdm.log"))
    assert sorted(r.rank for r in rows if r.event == "scheduler_exception") == ["dp1-tp0-pp0", "dp3-tp0-pp0"]


@pytest.mark.parametrize("width", [40, 50, 72, 80, 100, 120, 150])
def test_a_wrapped_leak_report_keeps_its_sign_and_its_crash_row(width: int) -> None:
    lines = file_lines(REAL / "sglang-16067-leaked-mamba-pages.log")
    _, whole = replayed(SGLANG, lines)
    report, rows = replayed(SGLANG, wrap(lines, width))
    assert report.first_problem is not None
    assert report.first_problem.verdict == "mamba: deficit of 1 slot (leak); full: balanced"
    assert [(r.rank, r.event) for r in rows] == [(r.rank, r.event) for r in whole]  # the crash row too


def test_the_reporters_wrap_and_cut_of_a_report_give_no_sign() -> None:
    report, rows = replayed(SGLANG, file_lines(REAL / "sglang-27666-wrapped-and-cut.log"))
    (leak,) = rows
    assert leak.verdict == ""  # protected=-12: a counter that cannot be right, no deficit or surplus
    assert leak.error is not None
    assert (leak.error.cls.value, leak.error.bugs) == ("counter", ("S13",))
    assert report.assembly.rejoined["wrap"] == 1


def test_a_preemption_only_vllm_log_is_vllms_and_healthy(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, table = run(capsys, "vllm-1361-preemption-only.log")
    assert (code, doc["engine"]) == (0, "vllm")  # before: SGLang's, exit 3
    evidence = doc["engine_evidence"]
    assert isinstance(evidence, dict)
    assert evidence["told_by"] == "marks"
    assert evidence["marks"] == {"a vLLM process tag": 6}
    assert "engine: vLLM, from 6 of 6 lines (a vLLM process tag x6)" in table


def test_the_collectors_prefixes_and_a_glued_bar_are_said() -> None:
    report, _ = replayed(VLLM, file_lines(REAL / "vllm-23534-enginecore-n-tqdm.log"))
    assert report.assembly.dropped == {"progress bar": 2}
    report, _ = replayed(VLLM, file_lines(REAL / "vllm-2047-journald.log"))
    assert report.assembly.stripped == {"journald": 12}
    report, rows = replayed(VLLM, file_lines(REAL / "vllm-18115-glued-stats.log"))
    assert (report.assembly.unglued, len([r for r in rows if r.event == "stats"])) == (1, 3)


def test_a_worker_inside_an_enginecore_tag_is_no_enginecore_crash() -> None:
    report, rows = replayed(VLLM, file_lines(REAL / "vllm-22430-nested-ray.log"))
    assert (report.incidents, rows) == ({}, [])


def test_wrapping_at_any_terminal_width_never_makes_a_false_alarm() -> None:
    healthy = [c.name for c in CASES if c.code == 0 and not c.errors]
    for name in healthy:
        dialect = VLLM if name.startswith("vllm") else SGLANG
        lines = file_lines(REAL / name)
        for width in range(40, 201, 23):
            report, _ = replayed(dialect, wrap(lines, width))
            assert not report.problem, (name, width)


def test_the_excerpts_read_as_the_sources_readme_says(tmp_path: Path) -> None:
    table = (REAL / "SOURCES.md").read_text()
    assert sum(line.startswith("| `") for line in textwrap.dedent(table).splitlines()) == len(CASES)

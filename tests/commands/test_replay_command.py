from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from tests.helpers import FIXTURES, seed_issue

from poolwatch.commands.replay import command as replay_command
from poolwatch.sources.logfile.replay import Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.sglang.log.dialect import DIALECT

LOGS = FIXTURES / "sglang"
DECODE = (
    "[2026-01-01 00:{m:02d}:{s:02d} TP0] Decode batch, #running-req: 2, #token: {n}, token usage: 0.00, "
    "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0"
)


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    replay_command.add_arguments(parser)
    code = replay_command.run(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_seed_traceback_replays_to_a_mamba_surplus_of_one_slot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = replay(capsys, str(seed_issue()))
    assert code == 1
    assert "mamba: surplus of 1 slot (double free); full: balanced" in out
    assert out.rstrip().splitlines()[-1] == (
        "first problem: 2025-10-31 10:40:43 dp0-tp0-pp0 (leak_detected): "
        "mamba: surplus of 1 slot (double free); full: balanced"
        " \u2014 double free (mamba): reported by SGLang's idle check; matches S01"  # the seed is bug S01
    )


@pytest.mark.parametrize(
    ("name", "first"),
    [
        (
            "v0.5.4.post1-pd-prefill-mamba-crash.log",
            "(leak_detected): mamba: surplus of 1 slot (double free)",
        ),
        ("v0.5.4.post1-radix-decode-restart.log", "(busy_check_failed): full: deficit of 10 slots (leak)"),
        ("v0.5.9-mamba-warn.log", "(leak_detected): mamba: deficit of 1 slot (leak); full: balanced"),
        ("v0.5.9-pd-decode.log", "(decode): mamba: surplus of at least 1 slot (double free)"),
        (
            "v0.5.12-dp-mamba-warn.log",
            "dp1-tp0-pp0 (prefill): mamba: surplus of at least 1 slot (double free)",
        ),
    ],
)
def test_each_release_log_names_its_first_problem(
    capsys: pytest.CaptureFixture[str], name: str, first: str
) -> None:
    code, out, _ = replay(capsys, str(LOGS / name))
    assert code == 1
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("first problem: ")
    assert first in last


def test_a_clean_log_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "clean.log"
    log.write_text("\n".join(DECODE.format(m=0, s=i, n=100 + i) for i in range(30)) + "\n")
    code, out, _ = replay(capsys, str(log), "--every", "10")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "time",
        "rank",
        "event",
        "n",
        "full",
        "swa",
        "mamba",
        "req",
        "running",
        "waiting",
        "verdict",
    ]
    assert [line.split()[3:6] for line in lines[1:4]] == [
        ["batches", "10", "109"],
        ["batches", "10", "119"],
        ["batches", "10", "129"],
    ]
    assert lines[-1] == "no accounting problem found"


def test_json_output_is_one_document_with_the_timeline_and_the_first_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = replay(capsys, str(LOGS / "v0.5.12-dp-mamba-warn.log"), "--json", "--every", "0")
    doc = json.loads(out)
    assert code == 1
    assert doc["engine"] == "sglang"  # told by its lines (--engine auto)
    assert doc["problem"] is True
    assert doc["ranks"] == ["dp0-tp0-pp0", "dp1-tp0-pp0"]
    assert doc["incidents"] == {"busy_check_failed": 1, "leak_detected": 2, "scheduler_exception": 1}
    assert doc["first_problem"]["verdict"] == "mamba: surplus of at least 1 slot (double free)"
    events = [row["event"] for row in doc["timeline"]]
    assert events == [
        "prefill",
        "prefill",
        "prefill",
        "leak_detected",
        "leak_detected",
        "decode",
        "busy_check_failed",
        "scheduler_exception",
    ]
    times = [row["at"] for row in doc["timeline"]]
    assert times == sorted(times)


@pytest.mark.parametrize("argv", [["/nonexistent/sglang.log"], ["/tmp"], [__file__, "--every", "-1"]])
def test_bad_usage_or_an_unreadable_file_exits_two(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = replay(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("poolwatch replay: ")


def test_garbage_huge_lines_and_bad_bytes_do_not_stop_a_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "messy.log"
    log.write_bytes(
        b"\x00\xff\xfe binary junk\n"
        + b"z" * (300 << 10)
        + b"\n"
        + DECODE.format(m=0, s=1, n=-5).encode()
        + b"\n"
        + b"[2026-01-01 00:00:02 TP0] last line without a newline"
    )
    code, out, _ = replay(capsys, str(log), "--every", "0")
    assert code == 1
    assert "full: surplus of at least 5 slots (double free)" in out


def test_rows_leave_as_soon_as_their_window_closes() -> None:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "w", rows.append, every=60.0)
    replayer.feed([DECODE.format(m=0, s=5, n=1), DECODE.format(m=0, s=50, n=2)])
    assert rows == []  # the window is still open
    replayer.feed(
        [DECODE.format(m=1, s=5, n=3), "[2026-01-01 00:02:00 TP0] next record", "[2026-01-01 00:02:01 TP0] x"]
    )
    assert [(r.event, r.batches, r.figures) for r in rows] == [("batches", 2, {"full": "2"})]
    report = replayer.finish()
    assert [r.figures for r in rows[1:]] == [{"full": "3"}]
    assert report.lines == 5
    assert report.first_problem is None


@pytest.mark.slow
def test_a_long_log_replays_in_constant_memory(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    with log.open("w") as out:
        for i in range(100_000):
            out.write(DECODE.format(m=(i // 60) % 60, s=i % 60, n=i) + "\n")
    rows = 0

    def count(_: Row) -> None:
        nonlocal rows
        rows += 1

    tracemalloc.start()
    replayer = Replayer(DIALECT, "w", count, every=0)
    replay_command.stream_file(log, replayer, lambda _: None)
    report = replayer.finish()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.lines == 100_000
    assert rows == 100_000
    assert peak < 8 << 20  # the file is ~14 MB; memory stays at a few 1 MiB chunks


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "no line in a known SGLang format"),
        (b"GET / 200\nhello world\n[not a stamp] x\n", "no line in a known SGLang format"),
        (bytes(range(256)) * 40, "binary data, not a text log"),
        (b"\x28\xb5\x2f\xfd" + b"\x00" * 64, "zstd-compressed; decompress it first (zstdcat, unzip -p)"),
        (
            b"[2026-01-01 00:00:01] INFO:     Started server process [42]\n",
            "no line in a known SGLang format",
        ),
    ],
    ids=["empty", "no-sglang", "binary", "zstd", "only-uvicorn"],
)
def test_input_with_nothing_recognisable_says_so_and_exits_three(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str
) -> None:
    log = tmp_path / "input"
    log.write_bytes(content)
    code, _, err = replay(capsys, str(log))
    assert code == replay_command.EXIT_UNRECOGNISED == 3
    assert err.strip() == f"poolwatch replay: {log}: recognised nothing: {why}"


def test_a_gzip_log_replays_like_the_plain_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = LOGS / "v0.5.9-mamba-warn.log"
    packed = tmp_path / "sglang.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert replay(capsys, str(packed))[:2] == replay(capsys, str(plain))[:2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("err", "drawn"), [(Terminal(), True), (io.StringIO(), False)], ids=["tty", "pipe"])
def test_the_progress_bar_is_drawn_only_on_a_terminal(err: io.StringIO, drawn: bool) -> None:
    path = LOGS / "v0.5.9-mamba-warn.log"
    replayer = Replayer(DIALECT, "w", lambda _: None)
    replay_command.stream_file(path, replayer, replay_command._progress(path, err))
    assert ("100.0% of" in err.getvalue()) is drawn
    assert err.getvalue().endswith("\n") is drawn


@pytest.mark.slow
def test_a_closed_output_pipe_ends_replay_quietly(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_text("\n".join(DECODE.format(m=i // 60 % 60, s=i % 60, n=-1) for i in range(20_000)) + "\n")
    command = f"{sys.executable} -m poolwatch.cli replay --every 0 {log} | head -n 2; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == replay_command.EXIT_CLOSED_PIPE == 141
    assert done.stderr == ""
    assert len(done.stdout.splitlines()) == 2

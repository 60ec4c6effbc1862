from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.errors import Reason, ScrapeError
from poolwatch.sources.logfile.tail import LogTail


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "sglang.log"
    path.write_bytes(b"")
    return path


@pytest.fixture
def tails() -> Iterator[Callable[..., LogTail]]:
    """Makes tails and closes them after the test."""
    made: list[LogTail] = []

    def make(path: Path, **options: int) -> LogTail:
        made.append(LogTail(path, **options))
        return made[-1]

    yield make
    for tail in made:
        tail.close()


def test_only_new_whole_lines_are_returned(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log)
    append(log, b"one\ntwo\n")
    assert tail.read().lines == ["one", "two"]
    assert tail.read().lines == []
    append(log, b"three\n")
    assert tail.read().lines == ["three"]


def test_a_line_without_its_newline_waits_for_it(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log)
    append(log, b"[2025-10-31 10:40:43 TP0] Prefill ba")
    assert tail.read().lines == []
    append(log, b"tch, #new-seq: 1\n")
    assert tail.read().lines == ["[2025-10-31 10:40:43 TP0] Prefill batch, #new-seq: 1"]


def test_a_rotated_file_is_read_to_its_end_before_the_new_one_and_its_cut_tail_is_not_parsed(
    log: Path, tails: Callable[..., LogTail]
) -> None:
    tail = tails(log)
    append(log, b"old-1\n")
    assert tail.read().lines == ["old-1"]
    append(log, b"old-2\nold-tail-without-newline")
    log.rename(log.with_suffix(".log.1"))
    log.write_bytes(b"new-1\n")
    read = tail.read()
    assert read.rotated
    assert read.lines == ["old-2"]
    assert read.cut == len(b"old-tail-without-newline")
    assert tail.read().lines == ["new-1"]


def test_a_truncated_file_is_read_again_from_its_start(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log)
    append(log, b"a long first line\nanother\n")
    assert tail.read().lines == ["a long first line", "another"]
    log.write_bytes(b"fresh\n")  # copytruncate, then one write
    read = tail.read()
    assert read.truncated
    assert read.lines == ["fresh"]


def test_a_missing_file_is_an_io_error_until_it_appears(
    tmp_path: Path, tails: Callable[..., LogTail]
) -> None:
    tail = tails(tmp_path / "later.log")
    with pytest.raises(ScrapeError) as err:
        tail.read()
    assert err.value.reason is Reason.IO
    (tmp_path / "later.log").write_bytes(b"hello\n")
    assert tail.read().lines == ["hello"]


def test_a_closed_tail_resumes_where_it_stopped(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log)
    append(log, b"one\ntw")
    assert tail.read().lines == ["one"]
    tail.close()
    append(log, b"o\nthree\n")
    assert tail.read().lines == ["two", "three"]


def test_bytes_that_are_not_utf8_are_replaced(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log)
    append(log, b"caf\xe9 \xff\xfe ok\n")
    assert tail.read().lines == ["caf\ufffd \ufffd\ufffd ok"]


def test_a_huge_line_is_cut_and_the_next_line_still_read(log: Path, tails: Callable[..., LogTail]) -> None:
    tail = tails(log, max_line=1000, max_read=4096)
    append(log, b"x" * 10_000)
    first = tail.read().lines
    append(log, b"y" * 10_000 + b"\nnext\n")
    lines = first
    while True:
        read = tail.read()
        lines += read.lines
        if not read.more:
            break
    assert lines == ["x" * 1000 + "\u2026", "next"]  # marked: a number at the cut is not read


def test_a_backlog_is_read_in_bounded_steps(log: Path, tails: Callable[..., LogTail]) -> None:
    append(log, b"".join(b"line %d\n" % i for i in range(1000)))
    tail = tails(log, max_read=1024)
    first = tail.read()
    assert first.more
    lines = list(first.lines)
    while True:
        read = tail.read()
        lines += read.lines
        if not read.more:
            break
    assert lines == [f"line {i}" for i in range(1000)]


def test_on_first_open_only_the_end_of_a_big_file_is_read(log: Path, tails: Callable[..., LogTail]) -> None:
    append(log, b"".join(b"line %04d\n" % i for i in range(1000)))
    tail = tails(log, backfill=100)
    lines = tail.read().lines
    assert lines[-1] == "line 0999"
    assert 0 < len(lines) <= 10
    assert all(len(line) == 9 for line in lines)  # the line cut by the seek is dropped


def test_the_last_unterminated_line_of_a_finished_file_can_be_taken(
    log: Path, tails: Callable[..., LogTail]
) -> None:
    append(log, b"one\nlast")
    tail = tails(log)
    assert tail.read().lines == ["one"]
    assert tail.finish() == ["last"]
    assert tail.position == len(b"one\nlast")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_any_appended_bytes_come_back_as_the_lines_they_hold(chunks: list[bytes]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.log"
        path.write_bytes(b"")
        tail = LogTail(path, max_line=1 << 20)
        got: list[str] = []
        for chunk in chunks:
            append(path, chunk)
            got += tail.read().lines
        got += tail.finish()
        tail.close()
        data = b"".join(chunks)
        expected = [p.decode("utf-8", errors="replace") for p in data.split(b"\n")]
        if expected and expected[-1] == "":
            expected.pop()
        assert "".join(got) == "".join(expected)  # split points may differ only inside bad bytes
        assert len(got) == len(expected)
        assert os.path.exists(path)

"""The log tail at its I/O edges: a truncation refilled past our offset before the next read loses
no line, and a deleted log goes down (an ``io`` error) instead of staying up forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from poolwatch.errors import Reason, ScrapeError
from poolwatch.sources.logfile.tail import LogTail


def test_a_truncation_refilled_past_the_offset_is_read_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_bytes(b"first\nsecond\n")
    with LogTail(log) as tail:
        assert tail.read().lines == ["first", "second"]
        log.write_bytes(b"new one\nnew two\nnew three\n")  # copytruncate, then a quick refill
        read = tail.read()
    assert read.truncated
    assert read.lines == ["new one", "new two", "new three"]


def test_plain_appends_are_not_mistaken_for_a_rewrite(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_bytes(b"a\n")
    with LogTail(log) as tail:
        assert tail.read().lines == ["a"]
        for i in range(5):
            with log.open("ab") as out:
                out.write(f"line {i}\n".encode())
            read = tail.read()
            assert (read.lines, read.truncated) == ([f"line {i}"], False)


def test_a_deleted_log_goes_down_and_comes_back_when_it_is_written_again(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_bytes(b"a\n")
    with LogTail(log) as tail:
        assert tail.read().lines == ["a"]
        log.unlink()
        assert tail.read().lines == []  # one read of grace: a rotation renames, then re-creates
        with pytest.raises(ScrapeError) as err:
            tail.read()
        assert err.value.reason is Reason.IO
        with pytest.raises(ScrapeError):
            tail.read()
        log.write_bytes(b"back\n")
        assert tail.read().lines == ["back"]

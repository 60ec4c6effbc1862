"""Record assembly, engine-neutral: which prefixless lines continue a message (``records.py``)."""

from __future__ import annotations

from poolwatch.sources.logfile.heads import Head, Ranks
from poolwatch.sources.logfile.records import Framing, RecordAssembler

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/x/engine.py", line 9, in step',
    "RuntimeError: boom",
]


def assemble(lines: list[tuple[str, Head | None]]) -> list[tuple[str, int]]:
    grouped = RecordAssembler(Framing())
    records = [r for text, head in lines for r in grouped.feed(text, head)] + grouped.flush()
    return [(r.message, len(r.continuation)) for r in records]


def head(message: str, level: str = "") -> Head:
    return Head(1.0, message, ranks=Ranks(), level=level)


def test_a_traceback_right_after_an_error_message_is_that_messages() -> None:
    """``logger.exception("engine crashed")``: the message line, then its traceback unprefixed."""
    lines = [("x", head("engine crashed", "ERROR")), *((t, None) for t in TRACEBACK)]
    assert assemble(lines) == [("engine crashed", 3)]


def test_a_traceback_after_an_info_line_or_a_levelless_one_is_pythons_own_stderr() -> None:
    for level in ("INFO", ""):
        lines = [("x", head("batch done", level)), *((t, None) for t in TRACEBACK)]
        assert assemble(lines) == [("batch done", 0), (TRACEBACK[0], 2)]


def test_only_the_very_next_line_can_be_an_error_messages_traceback() -> None:
    lines = [("x", head("engine crashed", "ERROR")), ("detail", None), *((t, None) for t in TRACEBACK)]
    assert assemble(lines) == [("engine crashed", 1), (TRACEBACK[0], 2)]

"""vLLM's line prefix of every release, and the noise production logs put around it."""

from __future__ import annotations

import datetime as dt

import pytest
from tests.sources.vllm.fakes import local

from poolwatch.sources.logfile.heads import Head, Ranks
from poolwatch.sources.logfile.prefixes import strip
from poolwatch.sources.vllm.log.lines import Calendar, VllmReader, rank_of, split_tag

DAY = dt.date(2025, 11, 2)
CYAN, RESET = "\x1b[0;36m", "\x1b[0;0m"


def parse_line(line: str, reader: VllmReader) -> Head | None:
    """vLLM's prefix of one line, collectors' prefixes and colour taken off first."""
    return reader.read(strip(line).text)


@pytest.mark.parametrize(
    ("line", "process", "level", "where", "message"),
    [
        (
            "INFO 10-31 10:40:43 [core.py:720] hello",
            "",
            "INFO",
            "core.py:720",
            "hello",
        ),  # no tag (a custom launcher)
        (  # 0.10.2 - 0.30.0: the process tag written by the wrapped stdout, in cyan
            f"{CYAN}(EngineCore_DP0 pid=4242){RESET} ERROR 10-31 10:40:43 [core.py:720] EngineCore x.",
            "EngineCore_DP0",
            "ERROR",
            "core.py:720",
            "EngineCore x.",
        ),
        (  # 0.31.0+: the tag in the format itself
            "(APIServer pid=11811) INFO 10-31 10:40:43 [loggers.py:335] Engine 000: a",
            "APIServer",
            "INFO",
            "loggers.py:335",
            "Engine 000: a",
        ),
        (  # 0.31.0+ on a terminal: cyan tag, green level, grey stamp and file (ColoredFormatter)
            f"{CYAN}(EngineCore pid=9){RESET} \x1b[32mINFO\x1b[0m \x1b[90m10-31 10:40:43\x1b[0m "
            "\x1b[90m[core.py:133]\x1b[0m m",
            "EngineCore",
            "INFO",
            "core.py:133",
            "m",
        ),
        (  # a Ray actor's tag before vLLM's own
            "(EngineCoreActor pid=5002, ip=10.0.0.8) (EngineCore_DP1 pid=5002) WARNING 10-31 10:40:43 "
            "[a.py:1] w",
            "EngineCore_DP1",
            "WARNING",
            "a.py:1",
            "w",
        ),
        (  # a Kubernetes CRI line, and VLLM_LOGGING_PREFIX before the level
            "2025-10-31T10:40:43.104512877Z stderr F (Worker_TP1 pid=77) [vllm] DEBUG 10-31 10:40:43 "
            "[b.py:9] x\r",
            "Worker_TP1",
            "DEBUG",
            "b.py:9",
            "x",
        ),
        (
            "\x00\x00(APIServer pid=1) CRITICAL 10-31 10:40:43 [c.py:2] ",
            "APIServer",
            "CRITICAL",
            "c.py:2",
            "",
        ),
    ],
)
def test_the_prefix_of_every_release_names_process_level_and_place(
    line: str, process: str, level: str, where: str, message: str
) -> None:
    parsed = parse_line(line, VllmReader(DAY))
    assert parsed is not None
    assert (parsed.stream, parsed.level, parsed.where, parsed.message) == (process, level, where, message)
    assert parsed.at == local("2025-10-31 10:40:43")


@pytest.mark.parametrize(
    "line",
    [
        "",
        'INFO:     127.0.0.1:50964 - "GET /health HTTP/1.1" 200 OK',  # uvicorn's own access log
        "(EngineCore_DP0 pid=1) Traceback (most recent call last):",  # Python's report on a wrapped stderr
        '  File "/x/vllm/v1/core/block_pool.py", line 690, in get_new_blocks',
        "[2025-10-31 10:40:43 TP0] Decode batch, #running-req: 3",  # SGLang's prefix
        "2025-10-31 10:40:43,123 INFO 4242 [scheduler.py:812] x",  # a custom logging format
        "INFO 02-30 10:40:43 [core.py:1] no such day",
        "INFO 10-31 10:40 [core.py:1] no seconds",
    ],
)
def test_lines_without_vllms_prefix_continue_a_record(line: str) -> None:
    assert parse_line(line, VllmReader(DAY)) is None


def test_the_lines_of_one_message_share_their_key() -> None:
    head = "(EngineCore pid=1) ERROR 10-31 10:40:43 [core.py:1512] "
    reader = VllmReader(DAY)
    first = parse_line(head + "EngineCore encountered a fatal error.\r", reader)
    last = parse_line(head + "AssertionError", reader)
    assert first is not None
    assert last is not None
    assert first.key == last.key
    assert first.message == "EngineCore encountered a fatal error."


def test_a_line_that_lost_its_bracket_and_the_old_format_are_read() -> None:
    reader = VllmReader(DAY)
    lost = parse_line(
        "(EngineCore pid=463) ERROR 05-27 18:56:31 core.py:1142] EngineCore encountered", reader
    )
    old = parse_line("INFO 01-03 16:21:03 logger.py:37] Received request cmpl-1", reader)
    assert lost is not None
    assert old is not None
    assert (lost.where, lost.message, old.where) == ("core.py:1142", "EngineCore encountered", "logger.py:37")


def test_a_prefix_inside_another_programs_text_is_not_read() -> None:
    forged = 'INFO:     1.2.3.4:5 - "GET /ERROR 08-25 16:35:26 [core.py:398] EngineCore encountered a fatal"'
    assert parse_line(forged, VllmReader(DAY)) is None


@pytest.mark.parametrize(
    ("day", "stamps", "years"),
    [
        (dt.date(2025, 11, 2), ["10-31", "11-01"], [2025, 2025]),
        (dt.date(2025, 11, 2), ["11-03"], [2025]),  # a day ahead: another zone, still this year
        (dt.date(2026, 1, 2), ["12-30", "12-31", "01-01", "01-02"], [2025, 2025, 2026, 2026]),  # New Year
        (dt.date(2025, 3, 1), ["10-31"], [2024]),  # later in the year than the file: last year's
    ],
)
def test_the_year_is_the_files_and_moves_on_at_new_year(
    day: dt.date, stamps: list[str], years: list[int]
) -> None:
    calendar = Calendar(day)
    got = []
    for stamp in stamps:
        at = calendar.at(int(stamp[:2]), int(stamp[3:]), 8, 0, 0)
        assert at is not None
        got.append(dt.datetime.fromtimestamp(at).year)
    assert got == years


@pytest.mark.parametrize(
    ("process", "rank"),
    [
        ("EngineCore_0", Ranks(0)),  # up to 0.10.1
        ("EngineCore_3", Ranks(3)),
        ("EngineCore_DP0", Ranks(0)),  # 0.10.2 - 0.19
        ("EngineCore_DP12", Ranks(12)),
        ("EngineCore", Ranks(0)),  # 0.20+ without DP
        ("EngineCoreActor", Ranks(0)),
        ("VllmWorker TP3", Ranks(0, 3)),  # the model runners name a tensor rank
        ("VllmWorker rank=1", Ranks(0, 1)),
        ("VllmWorker-2", Ranks(0, 2)),
        ("Worker_TP1", Ranks(0, 1)),
        ("Worker_DP1_PP1_TP2_EP2", Ranks(1, 2, 1)),
        ("APIServer", None),
        ("DPCoordinator", None),
        ("", None),
    ],
)
def test_ranks_are_read_from_every_naming_generation(process: str, rank: Ranks | None) -> None:
    assert rank_of(process) == rank


def test_a_tagged_line_without_a_prefix_keeps_its_process() -> None:
    assert split_tag("(EngineCore_DP0 pid=1) Process EngineCore_DP0:") == (
        "EngineCore_DP0",
        "Process EngineCore_DP0:",
    )
    assert split_tag("(A pid=1, ip=10.0.0.1) (B pid=2) x") == ("B", "x")
    assert split_tag("  File x") == (None, "  File x")

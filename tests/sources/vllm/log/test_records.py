"""vLLM's multi-line records: the prefix repeated on every line, other processes in between."""

from __future__ import annotations

from tests.sources.vllm.fakes import assemble

EC = "(EngineCore_DP0 pid=12) ERROR 10-31 10:40:43 [core.py:1512] "
API = "(APIServer pid=11) INFO 10-31 10:40:43 [loggers.py:335] "
STATS = "Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%"


def test_lines_repeating_a_prefix_are_one_record() -> None:
    (record,) = assemble(
        [
            EC + "EngineCore encountered a fatal error.\r",
            EC + "Traceback (most recent call last):\r",
            EC + "AssertionError",
        ]
    )
    assert record.stream == "EngineCore_DP0"
    assert record.lines == (
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        "AssertionError",
    )


def test_two_engines_statistics_in_one_second_are_two_records() -> None:
    records = assemble([API + f"Engine 000: {STATS}", API + f"Engine 001: {STATS}"])
    assert [r.message[:10] for r in records] == ["Engine 000", "Engine 001"]


def test_another_process_printing_into_a_traceback_does_not_cut_it() -> None:
    records = assemble(
        [
            EC + "EngineCore encountered a fatal error.",
            EC + "Traceback (most recent call last):",
            API + f"Engine 000: {STATS}",
            EC + '  File "/x/vllm/v1/core/block_pool.py", line 690, in get_new_blocks',
            EC + "AssertionError",
            "(Worker pid=13) INFO 10-31 10:40:44 [multiproc_executor.py:843] Parent process exited",
        ]
    )
    by_process = {r.stream: r for r in records}
    assert by_process["EngineCore_DP0"].lines[-1] == "AssertionError"
    assert len(by_process["EngineCore_DP0"].lines) == 4
    assert set(by_process) == {"EngineCore_DP0", "APIServer", "Worker"}


def test_pythons_report_of_a_dying_process_follows_the_traceback_it_belongs_to() -> None:
    records = assemble(
        [
            "(EngineCore_DP0 pid=12) Process EngineCore_DP0:",  # 0.10.2 - 0.30.0: stderr carries the tag
            "(EngineCore_DP0 pid=12) Traceback (most recent call last):",
            "(EngineCore_DP0 pid=12) AssertionError",
            'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 500',  # untagged, no traceback open
        ]
    )
    assert [(r.stream, r.headless, len(r.lines)) for r in records] == [
        ("EngineCore_DP0", True, 3),
        ("", True, 1),
    ]


def test_untagged_traceback_lines_join_the_open_traceback() -> None:
    (record,) = assemble(
        [EC + "Traceback (most recent call last):", '  File "x.py", line 1, in f', "ValueError: no"]
    )
    assert record.continuation == ('  File "x.py", line 1, in f', "ValueError: no")


def test_a_record_is_bounded_and_no_line_is_lost() -> None:
    lines = [EC + "EngineCore encountered a fatal error.", *(EC + f"  line {i}" for i in range(450))]
    records = assemble(lines)
    assert sum(len(r.lines) for r in records) == 451
    assert max(len(r.lines) for r in records) <= 201
    assert records[1].headless
    assert records[1].stream == "EngineCore_DP0"


def test_an_untagged_traceback_on_stderr_is_one_record_of_its_own() -> None:
    records = assemble(
        [
            EC + "EngineCore encountered a fatal error.",
            EC + "AssertionError",
            "Process EngineCore_DP0:",  # 0.31+: Python's report of the dying process, no tag
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
            "AssertionError",
        ]
    )
    assert sorted((r.stream, r.headless, len(r.lines)) for r in records) == [
        ("", True, 1),  # "Process EngineCore_DP0:"
        ("", True, 3),  # its traceback, whole
        ("EngineCore_DP0", False, 2),
    ]

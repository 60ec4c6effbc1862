"""Every excerpt of ``tests/fixtures/sglang-logs`` (one per release family and production noise,
see its PROVENANCE.md) replays to the fault it holds, with the right pool, sign and size."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest
from tests.helpers import FIXTURES
from tests.sources.logs import file_lines, replay_cli

from poolwatch.commands.replay import command as replay_command
from poolwatch.model.rank import IncidentKind, Pool, Role
from poolwatch.sources.logfile.events import Figures, PoolSize
from poolwatch.sources.logfile.records import LogRecord
from poolwatch.sources.logfile.replay import Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.sglang.log.dialect import DIALECT
from rigs.log_records import records as dialect_records

CORPUS = FIXTURES / "sglang-logs"

CASES = [
    ("v0.1-kv-warning.log", 1, "(no time) dp0-tp0-pp0 (leak_detected): full: deficit of 144 slots (leak)"),
    ("v0.2-time-of-day.log", 1, "(leak_detected): req: deficit of 1 slot (leak)"),
    ("v0.3-kv-warning.log", 1, "(leak_detected): full: deficit of 8 slots (leak)"),
    ("v0.4.6-ray-userwarning.log", 1, "(leak_detected): full: surplus of 16 slots (double free)"),
    ("v0.4.6-pd-prefill-strict.log", 1, "(leak_detected): full: surplus of 4224 slots (double free)"),
    ("v0.5.2-swa-crlf.log", 1, "(leak_detected): swa: surplus of 4 slots (double free); full: balanced"),
    ("v0.5.4-cri-busy-check.log", 1, "(busy_check_failed): full: deficit of 10 slots (leak)"),
    (
        "v0.5.9-ansi-interleaved.log",
        1,
        "dp0-tp0-pp0 (leak_detected): mamba: surplus of 1 slot (double free); full: balanced",
    ),
    (
        "v0.5.12-custom-format-pool-report.log",
        1,
        "(leak_detected): swa: surplus of 2 slots (double free); full: balanced",
    ),
    ("v0.5.12-swa-busy-check.log", 1, "(busy_check_failed): swa: deficit of 36 slots (leak)"),
    (
        "v0.5.23-tree-sanity.log",
        1,
        "(tree_sanity_failed): Sanity check FAILED (2 violations across 911 nodes):",
    ),
    ("cut-mid-number.log", 1, "(leak_detected): token_to_kv_pool_allocator memory leak detected!"),
    (
        "v0.5.4-orphaned-leak-traceback.log",
        1,
        "(no time) unattributed (leak_detected): mamba: surplus of 1 slot (double free); full: balanced",
    ),
    ("no-sglang-lines.txt", 3, "recognised nothing: no line in a known SGLang format"),
]


def replay(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    return replay_cli(capsys, path)


def records(path: Path) -> list[LogRecord]:
    return dialect_records(DIALECT, file_lines(path))


def interpret(record: LogRecord) -> list[object]:
    return list(DIALECT.interpret(record))


@pytest.mark.parametrize(("name", "code", "last"), CASES, ids=[c[0] for c in CASES])
def test_each_excerpt_replays_to_its_fault_with_pool_sign_and_size(
    capsys: pytest.CaptureFixture[str], name: str, code: int, last: str
) -> None:
    got, out, _ = replay(capsys, CORPUS / name)
    assert got == code
    assert last in out.rstrip().splitlines()[-1]


def test_every_excerpt_is_in_the_table_and_in_the_provenance_notes() -> None:
    names = {p.name for p in CORPUS.iterdir() if p.name != "PROVENANCE.md"}
    assert names == {c[0] for c in CASES}
    notes = (CORPUS / "PROVENANCE.md").read_text()
    assert all(f"`{name}`" in notes for name in names)


@pytest.mark.parametrize(
    "compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"]
)
def test_a_compressed_log_replays_like_the_plain_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, compress: object
) -> None:
    assert callable(compress)
    plain = CORPUS / "v0.5.9-ansi-interleaved.log"
    packed = tmp_path / "sglang.log.any-name"
    packed.write_bytes(compress(plain.read_bytes()))
    assert replay(capsys, packed)[:2] == replay(capsys, plain)[:2]


def test_a_cut_number_on_the_incomplete_last_line_never_becomes_a_finding(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "w", rows.append, every=0)
    reader = replay_command.stream_file(CORPUS / "cut-mid-number.log", replayer, lambda _: None)
    report = replayer.finish()
    (leak,) = [r for r in rows if r.event == "leak_detected"]
    assert leak.figures == {
        Pool.FULL: "0"
    }  # SGLang reported a leak; mamba size 45 (cut from 454) is not read
    assert report.first_problem is not None
    assert report.first_problem.verdict == ""
    assert reader.cut_tail == 93
    code, out, _ = replay(capsys, CORPUS / "cut-mid-number.log")
    assert (code, "surplus" in out) == (1, False)
    assert "the last line is incomplete (93 bytes without a newline) and was not read" in out


def test_batch_lines_of_every_family_are_read() -> None:
    kinds: dict[str, list[str]] = {}
    for name in ("v0.1-kv-warning.log", "v0.2-time-of-day.log", "v0.3-kv-warning.log", "v0.5.2-swa-crlf.log"):
        events = [e for r in records(CORPUS / name) for e in interpret(r)]
        kinds[name] = [e.kind for e in events if isinstance(e, Figures)]
    assert kinds == {
        "v0.1-kv-warning.log": ["prefill", "prefill", "prefill"],
        "v0.2-time-of-day.log": ["prefill", "prefill", "decode", "decode", "decode"],
        "v0.3-kv-warning.log": ["prefill", "decode", "prefill"],
        "v0.5.2-swa-crlf.log": ["prefill", "decode"],
    }


def test_the_0_4_pd_prefill_line_reveals_its_role_and_queues() -> None:
    (batch,) = [
        e
        for r in records(CORPUS / "v0.4.6-pd-prefill-strict.log")
        for e in interpret(r)
        if isinstance(e, Figures)
    ]
    assert batch.role is Role.PREFILL
    assert batch.queues == {"running": 0, "waiting": 1, "bootstrap": 0, "inflight": 2}


def test_the_crash_and_the_report_inside_it_are_both_found() -> None:
    found = [
        e.incident.kind
        for r in records(CORPUS / "v0.5.4-cri-busy-check.log")
        for e in interpret(r)
        if not isinstance(e, Figures) and hasattr(e, "incident")
    ]
    assert found == [IncidentKind.BUSY_CHECK_FAILED, IncidentKind.SCHEDULER_EXCEPTION]


def test_startup_lines_of_every_family_give_the_pool_size() -> None:
    sizes = {
        name: [
            (e.pool, e.size) for r in records(CORPUS / name) for e in interpret(r) if isinstance(e, PoolSize)
        ]
        for name in ("v0.1-kv-warning.log", "v0.3-kv-warning.log", "v0.5.12-custom-format-pool-report.log")
    }
    assert sizes == {
        "v0.1-kv-warning.log": [(Pool.FULL, 38264)],
        "v0.3-kv-warning.log": [(Pool.FULL, 150004)],
        "v0.5.12-custom-format-pool-report.log": [(Pool.FULL, 512000)],
    }


@pytest.mark.parametrize(
    ("queues", "verdict"),
    [
        (
            "#prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, ",
            "",
        ),  # PD decode: size leaves out pre-alloc
        ("", "req: surplus of 2 slots (double free)"),
    ],
    ids=["pd-decode", "unified"],
)
def test_a_request_slot_report_is_read_only_where_its_total_is_the_whole_pool(
    queues: str, verdict: str
) -> None:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "w", rows.append, every=0)
    replayer.feed(
        [
            "[2026-03-02 14:00:00 TP0] Decode batch, #running-req: 1, #token: 40, token usage: 0.00, "
            f"{queues}cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0",
            "[2026-03-02 14:00:05 TP0] req_to_token_pool memory leak detected!"
            "available_size=130, total_size=128",
        ]
    )
    report = replayer.finish()
    assert report.first_problem is not None
    assert report.first_problem.event == "leak_detected"
    assert report.first_problem.verdict == verdict

"""Every excerpt of ``tests/fixtures/vllm-logs`` (one per statistics family and production noise,
and a real 0.32.0 capture; see its PROVENANCE.md) replays to the timeline and fault it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.sources.logs import replay_cli
from tests.sources.vllm.fakes import DAY, LOGS, file_events

from poolwatch.model.rank import IncidentKind, Pool
from poolwatch.sources.logfile.events import Figures, RankIncident, Start
from poolwatch.sources.logfile.replay import Row
from poolwatch.sources.logfile.replayer import Replayer
from poolwatch.sources.vllm.log.dialect import DIALECT

FREED_TWICE = "double free: a block handed out while still referenced: freed twice before; matches V01, O11"
POOL_FAULT = FREED_TWICE + " \u2014 EngineCore encountered a fatal error. ["
CASES = [
    (
        "v0.10.2-s1-remove-invalid-block.log",
        1,
        "double free: a block taken off the free queue that is not on it: freed twice before; matches V01, "
        "O11 \u2014 EngineCore encountered a fatal error. [RuntimeError: remove() called on an invalid block",
    ),
    ("v0.11.1-s2-preemptions.log", 0, "no accounting problem found"),
    ("v0.19.1-engine-killed.log", 1, "the scheduler crashed (see above)"),
    ("v0.20.0-s3-dp2-surplus.log", 1, "dp1-tp0-pp0 (stats): full: surplus of at least 1 slot (double free)"),
    (
        "v0.27.0-ft-busy-loop.log",
        1,
        POOL_FAULT + "AssertionError at v1/core/block_pool.py:667 in get_new_blocks",
    ),
    ("v0.30.0-s4-xpu.log", 0, "no accounting problem found"),
    (
        "v0.31.0-s5-ray-dp2-new-year.log",
        1,
        "dp1-tp0-pp0 (scheduler_exception): " + POOL_FAULT + "AssertionError",
    ),
    ("v0.32.0-cpu-real-double-free.log", 1, POOL_FAULT + "AssertionError at v1/core/block_pool.py:690"),
    ("v0.34.0-s6-cri-kv-fetch.log", 1, POOL_FAULT + "AssertionError at v1/core/block_pool.py:718"),
]


def replay(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    return replay_cli(capsys, path, *extra)


@pytest.mark.parametrize(("name", "code", "last"), CASES, ids=[c[0] for c in CASES])
def test_each_excerpt_replays_to_its_timeline_and_fault(
    capsys: pytest.CaptureFixture[str], name: str, code: int, last: str
) -> None:
    got, out, _ = replay(capsys, LOGS / name)  # --engine auto: told by its lines
    assert got == code
    assert last in out.rstrip().splitlines()[-1]
    assert out.startswith("time ")
    assert " start v0." in out  # every excerpt shows EngineCore starting


def test_every_excerpt_is_in_the_table_and_in_the_provenance_notes() -> None:
    names = {p.name for p in LOGS.iterdir() if p.name != "PROVENANCE.md"}
    assert names == {c[0] for c in CASES}
    notes = (LOGS / "PROVENANCE.md").read_text()
    assert all(f"`{name}`" in notes for name in names)


def test_the_real_capture_replays_to_a_timeline_of_starts_statistics_and_the_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = replay(capsys, LOGS / "v0.32.0-cpu-real-double-free.log", "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["engine"] == "vllm"
    assert [r["event"] for r in doc["timeline"]] == [
        "start v0.32.0",
        "kv 1,048,576 tokens",
        "stats",
        "stats",
        "stats",
        "stats",
        "scheduler_exception",
    ]
    assert doc["timeline"][2]["figures"] == {"full": "0.1%"}
    assert doc["engine_evidence"]["told_by"] == "marks"
    assert doc["timeline"][-1]["error"]["bugs"] == ["V01", "O11"]
    assert (doc["timeline"][2]["running"], doc["timeline"][2]["waiting"]) == (8, 0)
    assert doc["incidents"] == {"scheduler_exception": 1}  # the API server's EngineDeadError adds none
    assert doc["cut_tail_bytes"] == 59


def test_the_crash_incident_names_the_exception_and_the_block_pool_frame() -> None:
    (crash,) = [
        e for e in file_events(LOGS / "v0.32.0-cpu-real-double-free.log") if isinstance(e, RankIncident)
    ]
    assert crash.error is not None
    assert (crash.error.cls.value, crash.error.bugs) == ("double free", ("V01", "O11"))
    assert crash.incident.kind is IncidentKind.SCHEDULER_EXCEPTION
    lines = crash.incident.message.splitlines()
    assert lines[0] == (
        "EngineCore encountered a fatal error. "
        "[AssertionError at v1/core/block_pool.py:690 in get_new_blocks: assert block.ref_cnt == 0]"
    )
    assert lines[-1] == "AssertionError"


def test_windows_summarise_each_engines_statistics() -> None:
    rows: list[Row] = []
    replayer = Replayer(DIALECT, "w", rows.append, every=60.0, day=DAY)
    replayer.feed((LOGS / "v0.20.0-s3-dp2-surplus.log").read_text().splitlines())
    report = replayer.finish()
    stats = [(r.rank, r.batches, r.figures, r.running, r.waiting) for r in rows if r.event == "stats"]
    assert [s for s in stats if s[0] == "dp1-tp0-pp0"] == [("dp1-tp0-pp0", 3, {Pool.FULL: "-0.0%"}, 7, 0)]
    assert report.ranks == {"dp0-tp0-pp0", "dp1-tp0-pp0"}


def test_every_family_gives_statistics_and_a_start() -> None:
    for name, *_ in CASES:
        found = file_events(LOGS / name)
        assert any(isinstance(e, Start) for e in found), name
        assert any(isinstance(e, Figures) for e in found), name


def test_noise_is_not_a_vllm_log(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = replay(capsys, LOGS.parent / "sglang-logs" / "no-sglang-lines.txt", "--engine", "vllm")
    assert code == 3
    assert "recognised nothing: no line in a known vLLM format" in err

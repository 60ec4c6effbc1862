"""The real-bug suite's framework without any engine: the entries' contract, the catalogue, the
verdicts and the generated table (the entries' runs are the ``bugs`` tier, ``test_entries.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from poolwatch.model.snapshot import Snapshot
from rigs.bugs import catalog, results, table
from rigs.bugs.entry import Bug, outcome
from rigs.timeline import Timeline
from rigs.venv import ROOT

BUG = Bug(
    id="S12",
    engine="sglang",
    title="protected never released",
    issue="https://github.com/sgl-project/sglang/pull/12774",
    fix="",
    bug_class="counter",
    affected="0.5.5.post2",
    fixed="0.5.5.post3",
    trigger="PD decode offload releases a finished request without its protected length",
)


def _row(**marks: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"wrong_act": [2, "w"], "finding": None, "page": None, "alert": None,
                            "alerts": {}, "engine": None, "struck": True, "release": "x"}  # fmt: skip
    base.update(marks)
    start = base["wrong_act"][0]
    for key in ("finding", "page", "alert", "engine"):
        base[f"steps_to_{key}"] = base[key][0] - start if base[key] else None
    return base


def test_a_bug_names_a_zoo_id_of_its_engine_a_class_and_two_releases() -> None:
    with pytest.raises(ValueError, match="not an sglang id") as raised:
        Bug("V01", "sglang", "t", "https://x", "", "leak", "1", "2", "t")
    with pytest.raises(ValueError, match="class 'leaky'"):
        Bug("S01", "sglang", "t", "https://x", "", "leaky", "1", "2", "t")
    with pytest.raises(ValueError, match="must be two releases"):
        Bug("S01", "sglang", "t", "https://x", "", "leak", "1", "1", "t")
    with pytest.raises(ValueError, match=r"runs on the affected release: 1\+fix"):
        Bug("S01", "sglang", "t", "https://x", "", "leak", "1", "2+fix", "t")
    assert "S01" not in str(raised.value)
    fixed = Bug("V01", "vllm", "t", "https://x", "", "leak", "0.18.0", "0.18.0+fix", "t")
    assert fixed.base(fixed.fixed) == "0.18.0"
    assert fixed.module == "rigs.bugs.vllm.v01"


def test_every_entry_module_holds_its_bug_and_a_run() -> None:
    modules = catalog.modules()
    bugs = catalog.bugs()
    assert [b.module for b in bugs] == modules
    assert len({b.id for b in bugs}) == len(bugs)
    for bug in bugs:
        module = __import__(bug.module, fromlist=["run"])
        assert callable(module.run)


def test_selecting_an_unknown_entry_or_engine_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="no entry S99"):
        catalog.select(["S99"])
    with pytest.raises(LookupError, match="no engine 'tgi'"):
        catalog.select(engine="tgi")


def test_the_verdicts_read_the_steps() -> None:
    assert table.verdict(BUG, None) == "not run"
    assert table.verdict(BUG, _row(struck=False)) == "not reproduced"
    named = _row(finding=[2, "deficit of 1 on mamba"], engine=[5, "leak detected"])
    assert table.verdict(BUG, named) == "named before the engine's signal"
    late = _row(finding=[6, "deficit"], engine=[5, "leak detected"])
    assert table.verdict(BUG, late) == "named after the engine's signal"
    held = "PoolwatchStrandedHold"
    paged = _row(alert=[9, held, "warning"], alerts={held: [9, "warning"]})
    assert table.verdict(BUG, paged) == "paged"
    assert table.verdict(BUG, _row()) == "missed"
    double = "PoolwatchDoubleFree"
    wrong = _row(alert=[3, double, "critical"], alerts={double: [3, "critical"]})
    assert table.verdict(BUG, wrong) == "misdiagnosed as PoolwatchDoubleFree"
    assert table.steps(paged) == "2 → never → +7 (PoolwatchStrandedHold, warning) → never"
    assert table.control(_row(struck=False)) == "silent"
    assert table.control(_row(struck=False, finding=[1, "surplus of 40 on full"])) == (
        "false alarm (surplus of 40 on full)"
    )
    assert table.control(_row()) == "struck (no control)"


def test_the_timeline_keeps_every_alert_that_fires_with_its_severity(seed_snapshot: Snapshot) -> None:
    timeline = Timeline()
    timeline.wrong(1, "frees a live slot")
    timeline.look(2, seed_snapshot)
    row = outcome("0.5.4.post1", True, timeline.row())
    assert row["alert"] == (2, "PoolwatchDoubleFree", "critical")
    assert row["alerts"]["PoolwatchDoubleFree"] == [2, "critical"]
    assert row["steps_to_alert"] == row["steps_to_page"] == 1
    assert (row["release"], row["struck"]) == ("0.5.4.post1", True)


def test_the_table_and_the_results_are_written_deterministically(tmp_path: Path) -> None:
    runs = {"S12": {"affected": _row(finding=[2, "counter"]), "fixed": _row(struck=False)}}
    results.save(runs, tmp_path / "r.json")
    assert results.load(tmp_path / "r.json") == json.loads(json.dumps(runs))
    assert results.dump(runs) == (tmp_path / "r.json").read_text()
    block = table.render([BUG], runs)
    link = "[PR #12774](https://github.com/sgl-project/sglang/pull/12774)"
    assert f"| **S12** protected never released | {link} |" in block
    doc = tmp_path / "bugs.md"
    doc.write_text(f"intro\n{table.BEGIN}\nold\n{table.END}\nend\n")
    with pytest.raises(ValueError, match="markers"):
        table.update("no markers", block)
    doc.write_text(table.update(doc.read_text(), block))
    assert table.check(block, doc) == ""
    assert doc.read_text().startswith("intro\n")
    assert doc.read_text().endswith("\nend\n")


def test_the_committed_table_is_current_and_the_cli_checks_it() -> None:
    out = subprocess.run([sys.executable, "-m", "rigs.bugs", "table", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    recorded = results.load()
    assert set(recorded) <= {b.id for b in catalog.bugs()}
    assert "rigs.bugs table --check" in (ROOT / "scripts" / "test").read_text()


def test_a_hold_aged_on_the_engines_clock_pages_past_its_bound_in_engine_steps(
    seed_snapshot: Snapshot,
) -> None:
    """A driver that gives the probe the timeline's clock (``Timeline.at``) ages its holds in engine
    steps: a hold first seen at step 2 under a 480 s bound (and the 60 s grace) pages at the first
    look past 540 s, 5401 steps of 0.1 s on -- not at the wall time the run took."""
    from dataclasses import replace

    from poolwatch.model.holds import Hold, Holder, HoldReason
    from poolwatch.model.progress import Progress
    from poolwatch.model.rank import Pool

    timeline = Timeline()
    full = {Pool.FULL: seed_snapshot.pools[Pool.FULL]}
    since = timeline.at(2)
    hold = Hold(Pool.FULL, HoldReason.KV_RECV, 7, 1, since, 480.0, (Holder("B", 7, since, True),), "ttl")
    clean = replace(seed_snapshot, pools=full, tripwires=(), progress=Progress(), holds=(hold,))
    timeline.wrong(2, "B aborted while waiting for remote KV")
    for step in (2, 3, 5402, 5403):
        timeline.look(step, replace(clean, taken_at=timeline.at(step)))
    row = timeline.row()
    assert row["alerts"] == {"PoolwatchStrandedHold": [5403, "warning"]}  # 7 slots: under 5 % of the pool
    assert row["steps_to_alert"] == 5401

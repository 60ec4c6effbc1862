"""The status page's pure functions, run by node against the shipped script (no browser needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from poolwatch.sidecar.app import STATIC_DIR

_SHIM = """
globalThis.window = {};
globalThis.document = { readyState: "loading", addEventListener() {} };
require(process.argv[1]);
const [name, args] = JSON.parse(process.argv[2]);
process.stdout.write(JSON.stringify(window.poolwatch[name](...args)));
"""


def call(name: str, *args: Any) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; the browser tests still run the script")
    result = subprocess.run(
        [node, "-e", _SHIM, str(STATIC_DIR / "statuspage.js"), json.dumps([name, list(args)])],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


RANK = {"worker": "decode-1", "role": "decode", "dp_rank": "0", "tp_rank": "2", "pp_rank": "0"}


def alert(name: str, severity: str, since: float, state: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "severity": severity,
        "labels": {"alertname": name, "severity": severity, **RANK, **labels},
        "annotations": {"summary": "static words", "description": f"{name} figures"},
        "active_since": since - 1,
        "fired_at": since,
    }


def test_criticals_come_first_then_firing_before_pending_then_the_oldest() -> None:
    doc = [
        alert("PoolwatchSnapshotStale", "warning", 10.0),
        alert("PoolwatchSlotLeak", "critical", 30.0, "pending", pool="full"),
        alert("PoolwatchDoubleFree", "critical", 20.0, pool="mamba"),
        alert("PoolwatchSchedulerCrashed", "critical", 5.0),
        alert("PoolwatchProbeDegraded", "info", 1.0),
        alert("PoolwatchDoubleFree", "critical", 1.0, "resolved", pool="swa"),
    ]
    order = [(a["name"], a["state"]) for a in call("normaliseAlerts", doc)]
    assert order == [
        ("PoolwatchSchedulerCrashed", "firing"),
        ("PoolwatchDoubleFree", "firing"),
        ("PoolwatchSlotLeak", "pending"),
        ("PoolwatchSnapshotStale", "firing"),
        ("PoolwatchProbeDegraded", "firing"),
    ]


def test_an_alert_row_shows_the_full_rank_the_description_and_when_it_began() -> None:
    doc = [alert("PoolwatchDoubleFree", "critical", 1764495062.0, pool="mamba", namespace="llm", pod="d-1")]
    doc[0]["annotations"]["description"] = (
        "Tripwire free_duplicate: 1 slot [17] first seen after process_batch"
    )
    (row,) = call("normaliseAlerts", doc)
    assert row["rank"] == "llm/d-1 \u00b7 decode-1 \u00b7 decode \u00b7 dp0 tp2 pp0 \u00b7 mamba"
    assert row["text"] == "Tripwire free_duplicate: 1 slot [17] first seen after process_batch"
    assert row["since"] == 1764495062.0


def test_two_tensor_ranks_of_one_worker_read_differently() -> None:
    tp0 = call("rankText", {**RANK, "tp_rank": "0", "pool": "mamba"})
    tp1 = call("rankText", {**RANK, "tp_rank": "1", "pool": "mamba"})
    assert tp0 != tp1


def test_times_carry_the_date_and_the_zone() -> None:
    assert call("stamp", 1764495062000, "UTC") == "2025-11-30 09:31:02 UTC"
    assert call("stamp", 1764495062000, "Asia/Tokyo") == "2025-11-30 18:31:02 GMT+9"


def test_a_rank_whose_scheduler_crashed_says_crashed_and_a_silent_one_says_gone() -> None:
    busy = {"key": "decode-1/dp0-tp2-pp0", "stale": False, "snapshot": {"phase": "busy"}}
    crash = alert("PoolwatchSchedulerCrashed", "critical", 5.0)
    assert call("rankStatus", busy, [])["text"] == "busy"
    assert call("rankStatus", busy, [crash])["text"] == "crashed"
    assert call("rankStatus", {**busy, "stale": True}, [crash])["text"] == "crashed"
    assert call("rankStatus", {**busy, "stale": True}, [])["text"] == "gone"
    other_rank = alert("PoolwatchSchedulerCrashed", "critical", 5.0, tp_rank="3")
    assert call("rankStatus", busy, [other_rank])["text"] == "busy"


SITE = {
    "kind": "free",
    "seq": 7,
    "frames": [
        {"file": "sglang/srt/mem_cache/memory_pool.py", "line": 387, "function": "HybridReqToTokenPool.free"},
        {
            "file": "sglang/srt/disaggregation/prefill.py",
            "line": 599,
            "function": "Mixin.process_prefill_chunk",
        },
    ],
}


def test_an_incident_names_the_engine_lines_that_freed_innermost_first() -> None:
    view = call("callSiteView", SITE, "process_prefill_chunk")
    assert view == {
        "lead": "Freed by",
        "frames": [
            "sglang/srt/mem_cache/memory_pool.py:387 HybridReqToTokenPool.free",
            "sglang/srt/disaggregation/prefill.py:599 Mixin.process_prefill_chunk",
        ],
    }


def test_a_call_site_taken_at_a_hook_or_missing_says_the_line_is_not_known() -> None:
    hook = call(
        "callSiteView", {**SITE, "kind": "hook", "frames": SITE["frames"][1:]}, "process_prefill_chunk"
    )
    assert hook["lead"].startswith(
        "The line that freed it is not known yet; found after process_prefill_chunk"
    )
    assert call("callSiteView", None, "x")["frames"] == []
    again = call("callSiteView", {**SITE, "kind": "next_free", "seq": 12}, "x")
    assert "caught again at iteration 12" in again["lead"]


def test_an_incident_row_links_its_bundle_as_markdown_and_json() -> None:
    item = {
        "id": "pw-0123456789abcdef",
        "rank": "prefill-0/dp0-tp0-pp0",
        "record": "repair",
        "kind": "refuse",
        "pool": "mamba",
        "count": 9,
        "hook": "mamba_pool.free",
        "engine": "sglang",
        "release": "0.5.4.post1",
        "first_seen_at": 1.0,
        "call_site": SITE,
    }
    view = call("incidentView", item)
    assert view["what"] == "guard refuse \u00b7 mamba \u00b7 9"
    assert view["where"] == "prefill-0/dp0-tp0-pp0 \u00b7 sglang 0.5.4.post1"
    assert view["markdown"] == "api/v1/incidents/pw-0123456789abcdef/bundle.md"
    assert view["json"] == "api/v1/incidents/pw-0123456789abcdef"

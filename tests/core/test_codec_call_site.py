"""The call site on the wire: carried by tripwires and repairs, absent from every older snapshot."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from poolwatch.codec.schema import MAX_FRAMES, SnapshotFormatError
from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

SITE = CallSite(
    CallSiteKind.FREE,
    (
        Frame("sglang/srt/mem_cache/memory_pool.py", 812, "HybridReqToTokenPool.free"),
        Frame("sglang/srt/disaggregation/prefill.py", 599, "PrefillMixin.process_prefill_chunk"),
    ),
    seq=41,
)


def _with_findings(seed: Snapshot, site: CallSite | None) -> Snapshot:
    wire = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (3,), "process_prefill_chunk", 41, call_site=site)
    done = Repair(RepairKind.REFUSE, Pool.MAMBA, 1, (3,), "mamba_pool.free", 41, ("r1",), call_site=site)
    return replace(seed, tripwires=(wire,), repairs=(done,))


def _wire(snap: Snapshot) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(dump_snapshot(snap)))
    return doc


def test_a_call_site_travels_with_its_tripwire_and_its_repair(seed_snapshot: Snapshot) -> None:
    snap = _with_findings(seed_snapshot, SITE)
    doc = _wire(snap)
    assert doc["tripwires"][0]["call_site"]["frames"][1] == {
        "file": "sglang/srt/disaggregation/prefill.py",
        "line": 599,
        "function": "PrefillMixin.process_prefill_chunk",
    }
    assert doc["repairs"][0]["call_site"]["kind"] == "free"
    assert parse_snapshot(doc) == snap


def test_a_finding_without_a_call_site_is_written_as_every_earlier_probe_wrote_it(
    seed_snapshot: Snapshot,
) -> None:
    doc = _wire(_with_findings(seed_snapshot, None))
    assert "call_site" not in doc["tripwires"][0]
    assert "call_site" not in doc["repairs"][0]


def test_a_snapshot_from_before_call_sites_decodes_with_none(seed_snapshot: Snapshot) -> None:
    doc = _wire(_with_findings(seed_snapshot, SITE))
    for item in (*doc["tripwires"], *doc["repairs"]):
        del item["call_site"]
    snap = parse_snapshot(doc)
    assert snap.tripwires[0].call_site is None
    assert snap.repairs[0].call_site is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(kind="stack"), r"tripwires\[0\].call_site.kind: 'stack' is not one of"),
        (lambda s: s["frames"][0].update(line=-1), r"call_site.frames\[0\].line: expected 0.."),
        (lambda s: s["frames"][0].update(file="x" * 300), "call_site.frames\\[0\\].file: longer than 256"),
        (lambda s: s.update(frames=s["frames"] * MAX_FRAMES), "call_site.frames: more than 16"),
    ],
)
def test_a_bad_call_site_is_named_in_the_error(seed_snapshot: Snapshot, change: Any, message: str) -> None:
    doc = _wire(_with_findings(seed_snapshot, SITE))
    change(doc["tripwires"][0]["call_site"])
    with pytest.raises(SnapshotFormatError, match=message):
        parse_snapshot(doc)

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.helpers import FIXTURES
from tests.strategies import wire_snapshots

from poolwatch.codec.schema import SnapshotFormatError, SnapshotVersionError
from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.inert import inert, is_inert
from poolwatch.model.snapshot import Snapshot

_SEED = parse_snapshot(json.loads((FIXTURES / "seed-snapshot.json").read_text()))


@given(wire_snapshots)
def test_a_snapshot_survives_a_json_round_trip(snap: Snapshot) -> None:
    assert parse_snapshot(json.loads(json.dumps(dump_snapshot(snap)))) == snap


@given(st.text(max_size=40))
def test_any_text_arrives_inert_and_as_long_as_it_was(text: str) -> None:
    """A control or invisible format character in any name or message becomes a visible sign
    (poolwatch.inert): one character for one, so every bound checked on it still holds."""
    doc = _doc(_SEED)
    doc["worker"]["worker"] = doc["worker"]["model"] = text
    doc["queues"] = {text: 1}
    doc["tripwires"] = [
        {"kind": "missing", "pool": "full", "slots": [1], "first_seen_hook": text, "requests": [text]}
    ]
    snap = parse_snapshot(doc)
    shown = inert(text)
    assert (snap.worker.worker, snap.worker.model, list(snap.queues)) == (shown, shown, [shown])
    assert (snap.tripwires[0].first_seen_hook, snap.tripwires[0].requests) == (shown, (shown,))
    assert len(shown) == len(text)
    assert is_inert(shown)
    assert not any(c in shown for c in "\x1b\r\n\x07\u202e")


def _doc(seed_snapshot: Snapshot) -> dict[str, Any]:
    return json.loads(json.dumps(dump_snapshot(seed_snapshot)))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("seq",), "12", "seq: expected an integer"),
        (("phase",), "sleeping", "phase: 'sleeping' is not one of idle, busy, unknown"),
        (("pools", "mamba", "available"), 4.5, "pools.mamba.available: expected an integer"),
        (("pools", "mamba", "size"), True, "pools.mamba.size: expected an integer"),
        (("worker", "role"), "router", "worker.role: 'router' is not one of prefill, decode, unified"),
        (("taken_at",), float("nan"), "taken_at: expected a finite number"),
        (("queues",), [], "queues: expected an object"),
        (("tripwires",), [{"kind": "free_duplicate", "pool": "kv"}], "tripwires[0].pool: 'kv' is not one of"),
        (("seq",), 10**400, "seq: expected 0..9007199254740992, got an integer of 401 digits"),
        (("seq",), -1, "seq: expected 0.."),
        (("pools", "mamba", "available"), -5, "pools.mamba.available: expected 0.."),  # not a double free
        (("worker", "worker"), "pod-\ud800", "worker.worker: not encodable text"),
        (("worker", "worker"), "w" * 257, "worker.worker: longer than 256 characters"),
        (("worker", "tp_rank"), 70000, "worker.tp_rank: expected 0..65535"),
        (("taken_at",), 1e308, "taken_at: expected a finite number"),
        (("queues",), {f"q{i}": 1 for i in range(100_000)}, "queues: more than 32 entries"),
        (("probe",), {"last_error": "x" * 5000}, "probe.last_error: longer than 4096"),
    ],
)
def test_a_bad_field_is_named_in_the_error(
    seed_snapshot: Snapshot, path: tuple[str, ...], value: object, message: str
) -> None:
    doc = _doc(seed_snapshot)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SnapshotFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_snapshot(doc)


def test_an_unknown_pool_name_is_refused(seed_snapshot: Snapshot) -> None:
    doc = _doc(seed_snapshot)
    doc["pools"]["kv"] = doc["pools"].pop("full")
    with pytest.raises(SnapshotFormatError, match="pools: 'kv' is not one of"):
        parse_snapshot(doc)


def test_a_newer_schema_version_is_a_version_error(seed_snapshot: Snapshot) -> None:
    doc = _doc(seed_snapshot)
    doc["version"] = 2
    with pytest.raises(SnapshotVersionError, match="unsupported 2"):
        parse_snapshot(doc)


@pytest.mark.parametrize("payload", [None, [], "snapshot", {"schema": "other"}])
def test_a_payload_that_is_not_a_snapshot_is_refused(payload: object) -> None:
    with pytest.raises(SnapshotFormatError):
        parse_snapshot(payload)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
    )
)
def test_any_json_value_either_parses_or_raises_a_format_error(payload: object) -> None:
    with contextlib.suppress(SnapshotFormatError):
        parse_snapshot(payload)


def test_a_tripwire_of_a_kind_a_newer_probe_names_is_skipped_not_the_snapshot(
    seed_snapshot: Snapshot,
) -> None:
    """A rolling upgrade can put a newer probe beside this sidecar: a finding of a kind it does not
    know is left out, and the snapshot (its pools, so its gap) still comes through; a malformed
    kind is still an error."""
    doc = _doc(seed_snapshot)
    known = {"kind": "free_duplicate", "pool": "mamba", "slots": [4]}
    doc["tripwires"] = [{"kind": "freed_by_a_newer_check", "pool": "full", "slots": [7]}, known]
    snap = parse_snapshot(doc)
    assert [(t.kind.value, t.slots) for t in snap.tripwires] == [("free_duplicate", (4,))]
    assert snap.pools == seed_snapshot.pools
    doc["tripwires"] = [{"kind": "no such kind!", "pool": "full"}]
    with pytest.raises(SnapshotFormatError, match="tripwires"):
        parse_snapshot(doc)

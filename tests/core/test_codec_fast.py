"""The codec's one-pass fast path gives exactly what the field-by-field parser gives.

``parse_snapshot`` tries :func:`poolwatch.codec.fast.common_snapshot` first and falls back on
``parse_snapshot_full``; the fast path may decline a payload (``None``) but must never accept one
the full parser refuses, nor build a snapshot that differs from the full parser's in any value or
type (``repr`` tells ``1`` from ``1.0`` and ``True``, which ``==`` does not).  Pinned on snapshots
an emulated rank's probe takes, on generated snapshots and on payloads with one field replaced
by a hostile value.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.strategies import wire_snapshots

from poolwatch.codec.fast import common_snapshot
from poolwatch.codec.schema import SCHEMA, SCHEMA_VERSION, SnapshotFormatError, parse_snapshot_full
from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.probe import new_probe
from rigs.fakes.clock import FakeClock


def fast(doc: object, limits: Limits = DEFAULT_LIMITS) -> Snapshot | None:
    return common_snapshot(doc, limits, SCHEMA, SCHEMA_VERSION)


def assert_same_verdict(doc: object, limits: Limits = DEFAULT_LIMITS) -> Snapshot | None:
    """The fast path declines, or builds exactly the full parser's snapshot; a refusal is the full
    parser's, with its message, through ``parse_snapshot`` too."""
    quick = fast(copy.deepcopy(doc), limits)
    try:
        full = parse_snapshot_full(doc, limits)
    except SnapshotFormatError as exc:
        refused: tuple[type[Exception], str] | None = (type(exc), str(exc))
    else:
        refused = None
    if refused is not None:
        assert quick is None, f"the fast path accepted what the full parser refuses: {refused[1]}"
        with pytest.raises(SnapshotFormatError) as caught:
            parse_snapshot(doc, limits)
        assert (type(caught.value), str(caught.value)) == refused  # a version error stays one
        return None
    if quick is not None:
        assert quick == full
        assert repr(quick) == repr(full)
    assert repr(parse_snapshot(doc, limits)) == repr(full)
    return quick


def wire(snap: Snapshot) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(dump_snapshot(snap)))
    return doc


def test_the_seed_snapshot_takes_the_fast_path_and_gives_the_full_parsers_snapshot(
    seed_snapshot: Snapshot,
) -> None:
    assert assert_same_verdict(wire(seed_snapshot)) is not None


@given(wire_snapshots)
def test_a_generated_snapshot_gives_the_same_snapshot_on_either_path(snap: Snapshot) -> None:
    doc = wire(snap)
    quick = assert_same_verdict(doc)
    if not (snap.tripwires or snap.incidents or snap.repairs):
        assert quick is not None  # the common shape is never left to the slow path


def paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key or index path into a decoded JSON document."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in [(*prefix, k), *paths(v, (*prefix, k))]]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in [(*prefix, i), *paths(v, (*prefix, i))]]
    return []


hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([-1, 2**53, 2**53 + 1, 65535, 65536, 10**400, 10**15, 10**15 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e15, 1.0000001e15, -1e15, 0.5, -0.0]),
    st.text(max_size=8),
    st.sampled_from(["x" * 256, "x" * 257, "x" * 4097, "\ud800", "é" * 200, "full", "busy", "exact"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["full", "size", "q", "worker"]), st.integers(0, 3), max_size=2),
)


@given(wire_snapshots, st.data())
def test_one_hostile_field_gets_the_same_verdict_and_reason_on_either_path(
    snap: Snapshot, data: st.DataObject
) -> None:
    doc = wire(snap)
    path = data.draw(st.sampled_from(paths(doc)))
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if data.draw(st.booleans()) or not isinstance(node, dict):
        node[path[-1]] = data.draw(hostile)
    else:
        del node[path[-1]]
    assert_same_verdict(doc)


EDGES = [None, True, False, 0, -1, 2**53, 2**53 + 1, 65535, 65536, 10**400, 10**15, 10**15 + 1, 1e15, -1e15]
EDGES += [
    1.0000001e15,
    0.5,
    1.0,
    float("nan"),
    float("inf"),
    "",
    "x" * 256,
    "x" * 257,
    "x" * 4096,
    "x" * 4097,
]
EDGES += ["\ud800", "é" * 200, "full", "busy", "exact", "prefill", [], ["x"], [1], {}, {"full": {}}]


def test_every_field_of_the_seed_snapshot_set_to_every_edge_value_gets_the_same_verdict(
    seed_snapshot: Snapshot,
) -> None:
    original = wire(seed_snapshot)
    for path in paths(original):
        for value in [*EDGES, "drop"]:
            doc = copy.deepcopy(original)
            node: Any = doc
            for key in path[:-1]:
                node = node[key]
            if value == "drop" and isinstance(node, dict):
                del node[path[-1]]
            else:
                node[path[-1]] = value
            assert_same_verdict(doc)


@pytest.mark.parametrize(
    ("mutate", "limits"),
    [
        (lambda d: d["queues"].update({f"q{i}": i for i in range(40)}), DEFAULT_LIMITS),
        (lambda d: d["queues"].update({"q": 1}), replace(DEFAULT_LIMITS, max_queues=1)),
        (lambda d: d.update({"version": True}), DEFAULT_LIMITS),
        (lambda d: d.update({"version": 1.0}), DEFAULT_LIMITS),
        (lambda d: d["pools"].update({"kv": d["pools"]["full"]}), DEFAULT_LIMITS),
        (lambda d: d["pools"]["full"].update({"pool": "swa"}), DEFAULT_LIMITS),
        (lambda d: d["pools"]["full"].update({"unreadable": ["x"] * 4097}), DEFAULT_LIMITS),
        (lambda d: d.update({f"extra{i}": i for i in range(4097)}), DEFAULT_LIMITS),
        (lambda d: d.update({"probe": {"samples_total": 1}}), DEFAULT_LIMITS),
        (lambda d: d.update({"probe": []}), DEFAULT_LIMITS),
        (lambda d: d["worker"].pop("worker"), DEFAULT_LIMITS),
        (lambda d: d.pop("seq"), DEFAULT_LIMITS),
        (lambda d: d.update({"tripwires": None}), DEFAULT_LIMITS),
    ],
)
def test_edge_shapes_get_the_same_verdict_on_either_path(
    seed_snapshot: Snapshot, mutate: Any, limits: Limits
) -> None:
    doc = wire(seed_snapshot)
    mutate(doc)
    assert_same_verdict(doc, limits)


def test_every_sample_an_emulated_busy_rank_takes_gives_the_same_snapshot_on_either_path() -> None:
    pytest.importorskip("poolwatch_emulator")
    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.sglang.engine import SGLANG
    from poolwatch_emulator.build import ModelShape
    from poolwatch_emulator.cluster import Cluster
    from poolwatch_emulator.cluster_config import ClusterConfig
    from poolwatch_emulator.workload import WorkloadConfig

    shape = ModelShape(full_kv_tokens=3072, mamba_slots=48, max_running_requests=12, context_len=2048)
    workload = WorkloadConfig(rate=30.0, prompt_median=600, output_median=200, burst_s=3.0, gap_s=2.0)
    cluster = Cluster(ClusterConfig(version="0.5.12", shape=shape, workload=workload, prefill=1, decode=1))
    clock = FakeClock()
    config = ProbeConfig(sample_interval_s=0.0, serve=False, directory="/nonexistent-poolwatch-test-dir")
    probes = [
        new_probe(SGLANG, s, config, environ={"POOLWATCH_WORKER": "w"}, clock=clock, wall=clock)
        for s in cluster.schedulers
    ]
    fast_taken = 0
    for _ in range(60):
        cluster.step()
        clock.advance(0.05)
        for probe in probes:
            fast_taken += assert_same_verdict(wire(probe.sample_now())) is not None
    assert fast_taken == 60 * len(probes)

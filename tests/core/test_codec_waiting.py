"""The wire form of holds, progress and pools added since schema 1: round trips, what an older
sidecar sees, what is refused, and the fast path's agreement with the full parser."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from poolwatch.codec.fast import common_snapshot
from poolwatch.codec.schema import (
    FIRST_POOLS,
    MORE_POOLS_KEY,
    SCHEMA,
    SCHEMA_VERSION,
    SnapshotFormatError,
    parse_snapshot_full,
)
from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.limits import DEFAULT_LIMITS
from poolwatch.model.holds import MAX_OWNER, Hold, Holder, HoldReason, owner_name
from poolwatch.model.progress import Progress
from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, WorkerId
from poolwatch.model.snapshot import Snapshot

WORKER = WorkerId("decode-0", engine="vllm", release="0.34.0")
FULL = PoolAccount(Pool.FULL, 39, 32, 0, 0, 0, 7, exactness=Exactness.EXACT)
ENCODER = PoolAccount(Pool.ENCODER, 2048, 3548, 0)
HOLD = Hold(
    Pool.FULL,
    HoldReason.KV_RECV,
    slots=7,
    owners=1,
    oldest=1000.0,
    timeout=480.0,
    named=(Holder("B", 7, 1000.0, aborted=True),),
    source="decoder_kv_blocks_ttl",
)
PROGRESS = Progress(admitted=12, preempted=3, fruitless=2, waiting=4, stalled_steps=9, stalled_since=1490.0)


def snapshot(**changes: Any) -> Snapshot:
    base: dict[str, Any] = {
        "worker": WORKER,
        "seq": 41,
        "taken_at": 1500.0,
        "phase": Phase.BUSY,
        "pools": {Pool.FULL: FULL},
        "source": "probe",
    }
    return Snapshot(**{**base, **changes})


def wire(snap: Snapshot) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(dump_snapshot(snap)))
    return out


def test_holds_progress_and_a_new_pool_survive_the_wire() -> None:
    snap = snapshot(
        pools={Pool.FULL: FULL, Pool.ENCODER: ENCODER},
        holds=(HOLD,),
        progress=replace_recent(PROGRESS),
    )
    assert parse_snapshot(wire(snap)) == snap


def replace_recent(p: Progress) -> Progress:
    return Progress(
        p.admitted,
        p.preempted,
        p.fruitless,
        p.waiting,
        p.stalled_steps,
        p.stalled_since,
        head=("w1", "w2"),
        recent=((1495.0, "R4"), (1496.0, "R5")),
    )


def test_an_older_sidecar_finds_only_what_it_knows_where_it_looks() -> None:
    """An older sidecar reads ``pools`` (refusing a pool it does not know) and ignores other keys:
    the new pool, holds and progress travel beside what it reads, and only when there are some."""
    doc = wire(snapshot(pools={Pool.FULL: FULL, Pool.ENCODER: ENCODER}, holds=(HOLD,), progress=PROGRESS))
    assert set(doc["pools"]) == {"full"}
    assert {Pool(p) for p in doc["pools"]} <= FIRST_POOLS
    assert set(doc[MORE_POOLS_KEY]) == {"encoder"}
    plain = wire(snapshot())
    assert not {MORE_POOLS_KEY, "holds", "progress"} & set(plain)


def test_a_snapshot_from_before_them_has_no_holds_and_no_progress() -> None:
    doc = wire(snapshot())
    assert doc["schema"] == SCHEMA
    assert doc["version"] == SCHEMA_VERSION
    snap = parse_snapshot(doc)
    assert snap.holds == ()
    assert snap.progress is None


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("holds", 0, "named", 0, "owner"), "x" * (MAX_OWNER + 1), "holds[0].named[0].owner"),
        (("holds", 0, "reason"), "sleeping", "holds[0].reason"),
        (("holds", 0, "timeout"), -1, "holds[0].timeout"),
        (("holds", 0, "slots"), -3, "holds[0].slots"),
        (("progress", "stalled_steps"), -1, "progress.stalled_steps"),
        ((MORE_POOLS_KEY, "encoder", "size"), -5, f"{MORE_POOLS_KEY}.encoder.size"),
        ((MORE_POOLS_KEY,), {"bogus": {}}, MORE_POOLS_KEY),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(path: tuple[Any, ...], value: object, field: str) -> None:
    doc = wire(snapshot(pools={Pool.FULL: FULL, Pool.ENCODER: ENCODER}, holds=(HOLD,), progress=PROGRESS))
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SnapshotFormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_snapshot(doc)


def test_an_owners_name_with_control_characters_enters_inert_as_every_snapshot_string_does() -> None:
    doc = wire(snapshot(pools={Pool.FULL: FULL}, holds=(HOLD,), progress=PROGRESS))
    doc["holds"][0]["named"][0]["owner"] = "evil\n[FIRING] forged"
    doc["progress"]["head"] = ["a\u202eb"]
    snap = parse_snapshot(doc)
    assert snap.holds[0].named[0].owner == "evil\u240a[FIRING] forged"
    assert snap.progress is not None
    assert snap.progress.head == ("a\ufffdb",)


def test_the_fast_path_builds_plain_progress_and_leaves_the_rest_to_the_full_parser() -> None:
    plain = wire(snapshot(progress=PROGRESS))
    fast = common_snapshot(copy.deepcopy(plain), DEFAULT_LIMITS, SCHEMA, SCHEMA_VERSION)
    assert fast is not None
    assert fast == parse_snapshot_full(plain)
    assert fast.progress == PROGRESS
    with_encoder = snapshot(pools={Pool.FULL: FULL, Pool.ENCODER: ENCODER})
    doc = wire(with_encoder)
    assert common_snapshot(doc, DEFAULT_LIMITS, SCHEMA, SCHEMA_VERSION) == with_encoder
    for snap in (snapshot(progress=replace_recent(PROGRESS)), snapshot(holds=(HOLD,))):
        doc = wire(snap)
        assert common_snapshot(doc, DEFAULT_LIMITS, SCHEMA, SCHEMA_VERSION) is None
        assert parse_snapshot(doc) == snap


def test_an_owner_name_is_inert_and_bounded() -> None:
    assert owner_name("req-42") == "req-42"
    assert owner_name("a\nb\x1b[31mc\u202ed") == "a\u240ab\u241b[31mc\ufffdd"  # poolwatch.inert's signs
    long = owner_name("r" * 500)
    assert len(long) == MAX_OWNER
    assert long.endswith("...")
    assert owner_name(12345) == "12345"
    assert owner_name("\ud800x") == "\ufffdx"

"""A tripwire's description names the live requests involved, when the probe knows them: the page
carries the request ids (docs/alerting.md, "What the receiver gets")."""

from __future__ import annotations

from dataclasses import replace

from poolwatch.conservation import findings
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.balance import PoolBalance
from poolwatch.detect.family import Seen
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot


def described(snap: Snapshot, wire: Tripwire) -> str:
    tripped = replace(snap, tripwires=(wire,))
    signals = PoolBalance(DetectorConfig()).signals(Seen(tripped, findings(tripped)))
    (text,) = [
        s.description for s in signals if s.labels == tuple(sorted(s.labels)) and "Tripwire" in s.description
    ]
    return text


def test_the_requests_of_a_tripwire_are_named(seed_snapshot: Snapshot) -> None:
    wire = Tripwire(
        TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (452,), "process_prefill_chunk", 411, ("req-7f3a",)
    )
    assert "[452] first seen after process_prefill_chunk at iteration 411, requests [req-7f3a]." in described(
        seed_snapshot, wire
    )


def test_a_tripwire_without_known_requests_says_nothing_of_them(seed_snapshot: Snapshot) -> None:
    wire = Tripwire(TripwireKind.FREE_DUPLICATE, Pool.MAMBA, (452,), "process_prefill_chunk", 411)
    text = described(seed_snapshot, wire)
    assert "at iteration 411." in text
    assert "requests [" not in text

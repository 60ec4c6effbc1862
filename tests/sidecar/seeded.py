"""The seed incident in a sidecar store, and the exposition it renders (the golden file)."""

from __future__ import annotations

from dataclasses import replace

from tests.helpers import FIXTURES, FakeClock

from poolwatch.errors import Reason
from poolwatch.model import Snapshot
from poolwatch.sidecar.store import SnapshotStore

GOLDEN = FIXTURES / "golden" / "seed-metrics.txt"


def seed_store(seed: Snapshot, clock: FakeClock) -> SnapshotStore:
    """The seed snapshot from a file source half a second ago, and one probe target timing out."""
    store = SnapshotStore()
    store.put(replace(seed, taken_at=clock.now - 0.5))
    store.record_success("file:seed-snapshot.json", "file", 0.002, at=clock.now - 0.5)
    store.record_failure("probe:gone", "probe", 2.0, Reason.TIMEOUT, "no answer")
    return store

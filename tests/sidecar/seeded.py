"""The seed incident in a sidecar store, and the exposition it renders (the golden file, its
``process_*`` values pinned)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from tests.helpers import FIXTURES

from poolwatch.errors import Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.app import process_collector
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock

GOLDEN = FIXTURES / "golden" / "seed-metrics.txt"
PROCESS_SAMPLE = re.compile(r"^(process_\w+) \S+$", flags=re.M)
PROCESS_FAMILIES = {
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
}


def pinned(text: str) -> str:
    """The exposition with every ``process_*`` value (this test process's CPU, memory, fds, start
    time) written ``NaN``: the golden file pins those families' names, help and types, not values."""
    return PROCESS_SAMPLE.sub(r"\1 NaN", text)


class FrozenProcess(Collector):
    """One collection of the real process collector, replayed: two renders compared byte for byte
    must not see the process's figures move in between."""

    def __init__(self) -> None:
        self._metrics = list(process_collector().collect())

    def collect(self) -> Iterable[Metric]:
        return iter(self._metrics)


def seed_store(seed: Snapshot, clock: FakeClock) -> SnapshotStore:
    """The seed snapshot from a file source half a second ago, and one probe target timing out."""
    store = SnapshotStore()
    store.put(replace(seed, taken_at=clock.now - 0.5))
    store.record_success("file:seed-snapshot.json", "file", 0.002, at=clock.now - 0.5)
    store.record_failure("probe:gone", "probe", 2.0, Reason.TIMEOUT, "no answer")
    return store

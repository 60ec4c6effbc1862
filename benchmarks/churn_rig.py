"""What the churn benchmarks share (``bench_churn.py``, ``bench_hostile_churn.py``): the seed
snapshot, a fake clock, the process's RSS, and the real store + detector + alerting wired on that
clock, as the sidecar wires them."""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import IdentitySettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.alerting import AlertWiring, build_alerting
from poolwatch.sidecar.store import SnapshotStore

SEED = Path(__file__).parent.parent / "tests" / "fixtures" / "seed-snapshot.json"
EPOCH = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = EPOCH

    def __call__(self) -> float:
        return self.now


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss() -> float:
    gc.collect()
    return rss_mib()


@dataclass
class Rig:
    """The seed and the sidecar's store and alerting on a fake clock that starts at ``EPOCH``."""

    seed: Snapshot
    clock: Clock
    settings: Settings
    store: SnapshotStore
    alerting: AlertWiring


def churn_rig(forget_after: float) -> Rig:
    seed = parse_snapshot(json.loads(SEED.read_text()))
    clock = Clock()
    settings = Settings(identity=IdentitySettings(worker="bench", forget_after=forget_after))
    store = SnapshotStore(history=settings.scrape.history, clock=clock)
    return Rig(seed, clock, settings, store, build_alerting(settings, store, clock))

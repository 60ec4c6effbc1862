"""The measures of ``bench_fleet.py``, each run alone: ``python fleet_measures.py NAME SECONDS``.

Prints one JSON line of figures.  Uses only APIs that the previous build has too, so the same
code measures both builds (a figure the previous build cannot give is left out).  The sidecar as a
process over a fake fleet is ``fleet_sidecar.py``; the measures here run in this process.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fleet_sidecar import fleet, proc_rss_mb  # benchmarks/ (this script's directory is on sys.path)


def cpu_quartile(fn: Callable[[], object], repeat: int) -> float:
    """CPU seconds of ``fn``: the lower quartile of ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        samples.append(time.process_time() - started)
    return statistics.quantiles(samples, n=4)[0] if repeat >= 4 else min(samples)


# -- in-process measures --------------------------------------------------------------------------


def render() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in (64, 1000):
        out.update(_render(n))
    return out


def _render(n: int) -> dict[str, Any]:
    from bench_sidecar import payload
    from prometheus_client import generate_latest

    from poolwatch.sidecar import app
    from poolwatch.sidecar.store import SnapshotStore

    out: dict[str, Any] = {}
    now = time.time()
    store = SnapshotStore(history=4)
    seq = [48211]

    def renew() -> None:  # a new snapshot of every rank (a new iteration, a new time)
        seq[0] += 1
        for rank in range(n):
            store.put(replace(payload(rank, now), seq=seq[0], taken_at=now + seq[0] * 1e-3))

    renew()
    registry = app.build_registry(store, time.time, 1e9)
    out[f"uncached_{n}"] = _after(renew, lambda: generate_latest(registry)) * 1e3
    page = generate_latest(registry)
    if hasattr(app, "build_exposition"):
        cached = app.build_exposition(store, time.time, 1e9)
        out[f"cached_{n}"] = _after(renew, lambda: cached.render(generate_latest, time.time())) * 1e3
        out[f"warm_{n}"] = cpu_quartile(lambda: cached.render(generate_latest, time.time()), 8) * 1e3
    zipped = gzip.compress(page, compresslevel=1)
    out[f"gzip_{n}"] = cpu_quartile(lambda: gzip.compress(page, compresslevel=1), 8) * 1e3
    out[f"size_{n}"] = f"{len(page) / 1024:.0f} / {len(zipped) / 1024:.0f}"
    out[f"bytes_per_rank_{n}"] = len(page) / n
    out[f"series_per_rank_{n}"] = sum(1 for ln in page.splitlines() if not ln.startswith(b"#")) / n
    return out


def _after(prepare: Callable[[], None], fn: Callable[[], object], repeat: int = 6) -> float:
    samples = []
    for _ in range(repeat):
        prepare()
        started = time.process_time()
        fn()
        samples.append(time.process_time() - started)
    return statistics.quantiles(samples, n=4)[0]


def detector() -> dict[str, Any]:
    from poolwatch.detect.config import DetectorConfig
    from poolwatch.detect.detector import Detector
    from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, Role, WorkerId
    from poolwatch.model.snapshot import ProbeHealth, Snapshot
    from poolwatch.target_state import TargetState

    def account(pool: Pool, size: int, avail: int, evict: int, prot: int, held: int) -> PoolAccount:
        return PoolAccount(pool, size, avail, evict, prot, held, 0, exactness=Exactness.EXACT)

    def snap(rank: int, seq: int, at: float) -> Snapshot:  # Mamba counted once too often: a double free
        pools = {
            Pool.FULL: account(Pool.FULL, 100_000, 90_000, 5_000, 3_000, 2_000),
            Pool.MAMBA: account(Pool.MAMBA, 476, 300, 100, 40, 37),
            Pool.REQ: account(Pool.REQ, 158, 120, 0, 0, 38),
        }
        worker = WorkerId(f"w{rank // 8}", Role.DECODE, 0, rank % 8, 0, "m", "0.5.12", "", engine="sglang")
        return Snapshot(worker=worker, seq=seq, taken_at=at, phase=Phase.BUSY, pools=pools, source="probe",
                        queues={"waiting": 3, "running": 38}, probe=ProbeHealth(samples_total=seq),
                        idle_check_strict=True, boot_id="b")  # fmt: skip

    n, now = 1000, [1_761_907_200.0]
    det = Detector(DetectorConfig(), lambda: now[0])
    targets = [TargetState(f"probe:{i}", "probe", up=True) for i in range(n)]
    cycles = []
    for seq in range(8):
        snaps = [snap(r, seq, now[0]) for r in range(n)]
        t0 = time.process_time()
        for s in snaps:
            det.observe(s)
        t1 = time.process_time()
        alerts = det.evaluate(now[0], latest=snaps, targets=targets)
        t2 = time.process_time()
        det.evaluate(now[0], latest=snaps, targets=targets)
        t3 = time.process_time()
        cycles.append((t1 - t0, t2 - t1, t3 - t2))
        now[0] += 1.0
    assert len(alerts) == n, len(alerts)
    best = [statistics.quantiles([c[i] for c in cycles[2:]], n=4)[0] for i in range(3)]
    return {"observe": best[0] / n * 1e6, "evaluate": best[1] * 1e3, "evaluate_idle": best[2] * 1e3,
            "cycle": (best[0] + best[1]) * 1e3, "alerts": len(alerts)}  # fmt: skip


def memory() -> dict[str, Any]:
    """What a sidecar watching 1,000 busy ranks holds once its histories and trend windows are full
    (~15 min of serving, which a fleet row's short window never reaches): every rank's answer
    decoded from JSON as the scrape loop does it (so no object is shared between snapshots), fed
    to the store and the detector as default-configured by the app, then one ``/metrics`` render
    (its cached blocks); the process's RSS, and how much of it the state adds."""
    from bench_sidecar import payload

    from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
    from poolwatch.detect.config import DetectorConfig
    from poolwatch.detect.detector import Detector
    from poolwatch.sidecar import app
    from poolwatch.sidecar.store import SnapshotStore

    n, step, now = 1000, 3.6, [1_761_907_200.0]  # a new trend point each step: ~250 per 900 s window
    template = json.dumps(dump_snapshot(payload(0, 0.0)))
    store = SnapshotStore()  # the defaults: history (and budget, where the build has one)
    det = Detector(DetectorConfig(), lambda: now[0])
    store.subscribe(det.observe)
    cached = hasattr(app, "build_exposition")  # the previous build renders uncached
    exposition = app.build_exposition(store, lambda: now[0], 1e9) if cached else None
    before = proc_rss_mb(os.getpid())
    for seq in range(int(900 / step) + 8):
        now[0] += step
        for rank in range(n):
            doc = json.loads(template)
            doc["worker"]["tp_rank"], doc["seq"], doc["taken_at"] = rank, 48211 + seq, now[0]
            full = doc["pools"]["full"]
            full["available"], full["held"] = full["available"] - seq % 7, full["held"] + seq % 7  # busy
            store.put(parse_snapshot(doc))
    if exposition is not None:
        from prometheus_client import generate_latest

        exposition.render(generate_latest, now[0])
    after = proc_rss_mb(os.getpid())
    held = sum(len(store.history(s.worker.key)) for s in store.latest())
    return {"rss": after, "state_mb": after - before, "snapshots": held}


def trend() -> dict[str, Any]:
    from poolwatch.detect.trend import GapSeries

    series, t = GapSeries(900.0), 1_761_907_200.0
    for i in range(900):
        series.add(t + i, i // 10, free=2000)
    i = [900]

    def step() -> None:
        for _ in range(200):
            i[0] += 1
            series.add(t + i[0], i[0], free=2000)  # a new gap every second: every trend is new
            series.trend()

    return {"observe": cpu_quartile(step, 12) / 200 * 1e6}


def probe() -> dict[str, Any]:
    from bench_probe import NO_CENSUS, rank_with

    from poolwatch.probe.core.reading import Reading
    from poolwatch.probe.lifecycle import attach, detach
    from poolwatch.probe.sglang.engine import SGLANG
    from poolwatch.probe.sglang.mamba_census import mamba_census
    from poolwatch.probe.sglang.requests import collect_live

    _, rank = rank_with(256)
    handle = attach(SGLANG, rank, NO_CENSUS, serve=False)
    try:
        out = {"sample_256": cpu_quartile(lambda: handle.sample_now("bench"), 400) * 1e6}

        def all_new() -> None:  # nothing kept from the last sample (a build without a memo: as is)
            if hasattr(handle, "_memo"):
                handle._memo = type(handle._memo)()
            handle.sample_now("bench")

        out["sample_256_new"] = cpu_quartile(all_new, 400) * 1e6
        reading = Reading()
        held = collect_live(rank, reading, "null")
        out["census_256"] = (
            cpu_quartile(lambda: mamba_census(rank, handle.shape, reading, held, idle=False), 40) * 1e6
        )
        template = rank.running_batch.reqs[0]
        for _ in range(9000):
            waiting = object.__new__(type(template))
            waiting.__dict__.update(template.__dict__, req_pool_idx=None, mamba_pool_idx=None, output_ids=[])
            rank.waiting_queue.append(waiting)
        out["sample_9000"] = cpu_quartile(lambda: handle.sample_now("bench"), 400) * 1e6
        out["live"] = len(held.holders)
    finally:
        detach(rank)
    return out


MEASURES: dict[str, Callable[[float], dict[str, Any]]] = {
    "fleet32": lambda s: fleet(1000, 32, s),
    "fleet32busy": lambda s: fleet(1000, 32, s, "busy"),
    "fleet32old": lambda s: fleet(1000, 32, s, "old"),
    "fleet1000": lambda s: fleet(1000, 1000, s),
    "sidecar8": lambda s: fleet(8, 32, s),
    "render": lambda s: render(),
    "detector": lambda s: detector(),
    "trend": lambda s: trend(),
    "memory": lambda s: memory(),
    "probe": lambda s: probe(),
}


def main(argv: list[str]) -> int:
    name, seconds = argv[0], float(argv[1]) if len(argv) > 1 else 20.0
    print(json.dumps(MEASURES[name](seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

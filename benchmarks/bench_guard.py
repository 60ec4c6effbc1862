"""Guard off vs on, every fault class x load x seed: crashes, shared slots, repairs, pages, latency.

Each run is an emulated deployment (``detection_cases.cases()``: the fault strikes at step 40)
stepped in process under the real probe, with traffic at 0.5x, 1x and 2x the case's rate.  The
sidecar is modelled the way it now runs: every snapshot the probe publishes reaches the detector
at once (the long-poll wakes on publish), and a rank that dies leaves its final snapshot, which the
detector also reads.  Per run it records, from the fault on (simulated seconds):

* **crash**: SGLang's own idle check crashed the worker within ``HORIZON`` s;
* **shared**: live requests found holding one Mamba slot at once (checked on the emulator's own
  objects after every scheduler iteration, not through the probe);
* **repairs**: slots the guard repaired; **false**: any repair or page in a fault-free run;
* **page**: the first firing alert on the struck worker with the fault's exact cause -- the right
  alert for its sign (PoolwatchDoubleFree / PoolwatchSlotLeak) or PoolwatchProbeRepaired, for the
  fault's pool -- and its latency.  ``named`` counts pages whose description names slot ids.

Wall-clock delivery (HTTP long-poll, webhook) is measured by ``bench_detection.py --push``.
**refused** counts the slots guard v2 refused to free (a subset of repairs; 0 on healthy runs).

``--free-path`` instead times one Mamba free (an ``alloc(1)`` + free pair) with guard v2's wrapper
(:mod:`poolwatch.probe.sglang.refuse`) on and off, for each release family's shape (the wrapped
``mamba_pool.free`` / ``mamba_allocator.free`` and ``free_mamba_cache``): nothing indexed, a live
chunked request, a tree index of 1,024 nodes; guard off installs nothing, so its cost is the bare
pool's.  It then runs a healthy emulated soak per emulated release with guard on
(``--soak-minutes``, 0 to skip) and reports the ranks wrapped and the slots refused.

Run: ``python benchmarks/bench_guard.py [--seeds 20] [--horizon 60]`` or ``... --free-path
[--soak-minutes 30]``.  Figures, never asserts.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from detection_cases import SIGN, Case, cases

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.detect.alert import AlertState
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.repairs import PROBE_REPAIRED
from poolwatch.discovery.files import read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.findings import RepairKind
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.sidecar import Settings
from poolwatch_emulator import Cluster
from poolwatch_emulator.faults import FAULTS

LOADS = (0.5, 1.0, 2.0)
_IDS = re.compile(r"\[\d+(, \d+)*( \.\.\.)?\]")


@dataclass
class Run:
    crashed: bool = False
    shared: int = 0
    repairs: int = 0
    refused: int = 0
    paged: float | None = None  # simulated seconds from the fault
    named: bool = False
    struck: bool = False
    wrong_pages: int = 0


@dataclass
class Row:
    runs: list[Run] = field(default_factory=list)


def shared_slots(cluster: Cluster) -> int:
    """Mamba slots held by two live requests at once, on any rank (the emulator's own objects)."""
    n = 0
    for rank in cluster.schedulers:
        reqs = (
            list(rank.running_batch.reqs)
            + list(rank.disagg_prefill_inflight_queue)
            + list(rank.waiting_queue)
        )
        if rank.chunked_req is not None:
            reqs.append(rank.chunked_req)
        seen: Counter[int] = Counter()
        for req in {id(r): r for r in reqs if not r.finished()}.values():
            idx = getattr(req, "mamba_pool_idx", None)
            if idx is not None:
                seen.update(int(i) for i in idx.reshape(-1).tolist())
        n += sum(1 for c in seen.values() if c > 1)
    return n


def exact_page(detector: Detector, fault: str, worker: str) -> tuple[bool, bool]:
    info = FAULTS[fault]
    for a in detector.alerts():
        labels = dict(a.labels)
        if a.state is not AlertState.FIRING or labels.get("worker") != worker:
            continue
        if a.name in (SIGN[info.sign], PROBE_REPAIRED) and labels.get("pool") == info.pool:
            return True, bool(_IDS.search(a.annotations.get("description", "")))
    return False, False


def attach_all(cluster: Cluster, work: Path, guard: bool) -> None:
    for worker in cluster.workers:
        version = cluster.release.name
        conf = ProbeConfig(directory=str(work), serve=False, worker=worker.name, release=version, guard=guard)
        for rank in worker.ranks:
            probe = attach(SGLANG, rank, conf, serve=False)
            probe.clock, probe.wall = (lambda: cluster.clock.now), cluster.clock.unix


def feed(cluster: Cluster, detector: Detector, seen: dict[int, Any]) -> None:
    """Every snapshot a live rank's probe published since the last step (the long-poll's push)."""
    for rank in (r for w in cluster.workers if not w.crashed for r in w.ranks):
        probe = probe_of(rank)
        snap = probe.latest if probe is not None else None
        if snap is not None and seen.get(id(rank)) is not snap:
            seen[id(rank)] = snap
            detector.observe(snap)


def struck_worker(cluster: Cluster, fault: str) -> str:
    return next((w.name for w in cluster.workers if any(r.faults.fired[fault] for r in w.ranks)), "")


def repairs(cluster: Cluster, kinds: tuple[RepairKind, ...] = tuple(RepairKind)) -> int:
    probes = [probe_of(rank) for rank in cluster.schedulers]
    return sum(
        r.count
        for p in probes
        if p is not None and p.latest is not None
        for r in p.latest.repairs
        if r.kind in kinds
    )


def run_once(c: Case, *, guard: bool, load: float, seed: int, horizon: float, work: Path) -> Run:
    workload = replace(c.config.workload, rate=c.config.workload.rate * load)
    cluster = Cluster(replace(c.config, workload=workload, seed=seed))
    attach_all(cluster, work, guard)
    detector = Detector(Settings().mixin(), cluster.clock.unix)
    seen: dict[int, Any] = {}
    out, struck_at, worker = Run(), None, ""
    while cluster.clock.now < (struck_at if struck_at is not None else 600.0) + horizon and not out.crashed:
        cluster.step()
        if struck_at is None and (worker := struck_worker(cluster, c.fault)):
            struck_at, out.struck = cluster.clock.now, True
        feed(cluster, detector, seen)
        out.shared += shared_slots(cluster)
        if cluster.crashed:
            out.crashed = True
            for _, doc in read_final_dir(work, read_secret(work) or ""):  # the vanished rank's last word
                detector.observe(parse_snapshot(doc))
        if struck_at is not None and out.paged is None:
            ok, named = exact_page(detector, c.fault, worker)
            if ok:
                out.paged, out.named = cluster.clock.now - struck_at, named
    out.repairs = repairs(cluster)
    out.refused = repairs(cluster, (RepairKind.REFUSE,))
    cluster.stop()
    return out


def pct(xs: list[bool]) -> str:
    return f"{100 * sum(xs) / len(xs):.0f} %" if xs else "—"


def latency(runs: list[Run]) -> str:
    lat = sorted(r.paged for r in runs if r.paged is not None)
    if not lat:
        return "—"
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return f"{statistics.median(lat):.2f} / {p99:.2f} / {lat[-1]:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--horizon", type=float, default=60.0, help="simulated seconds after the fault")
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    parser.add_argument("--free-path", action="store_true", help="time guard v2's free wrapper instead")
    parser.add_argument("--soak-minutes", type=float, default=30.0, help="--free-path: healthy soak length")
    parser.add_argument("--real", action="store_true", help="--free-path: on each release's own classes too")
    args = parser.parse_args(argv)
    if args.free_path:
        from bench_guard_free import free_path_table, soak_table
        from bench_guard_kv import kv_table

        print(free_path_table(), flush=True)
        print("\n" + kv_table(), flush=True)
        if args.real:
            from bench_guard_releases import real_table

            print("\n" + real_table(), flush=True)
        if args.soak_minutes > 0:
            print("\n" + soak_table(args.soak_minutes))
        return 0
    print(
        "| fault (case) | load | guard | runs | crashes | shared-slot sightings | repairs (slots) "
        "| refused | exact-cause page | with slot ids | page latency median / p99 / max, sim s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for n, c in enumerate(c for c in cases() if args.only in c.name):
            for load in LOADS:
                for guard in (False, True):
                    runs = []
                    for seed in range(args.seeds):
                        work = Path(tmp) / f"{n}-{load}-{guard}-{seed}"
                        work.mkdir()
                        runs.append(
                            run_once(c, guard=guard, load=load, seed=seed, horizon=args.horizon, work=work)
                        )
                    struck = [r for r in runs if r.struck]
                    print(
                        f"| {c.name} | {load:g}x | {'on' if guard else 'off'} | {len(struck)}/{len(runs)} "
                        f"| {sum(r.crashed for r in struck)} | {sum(r.shared for r in struck)} "
                        f"| {sum(r.repairs for r in struck)} | {sum(r.refused for r in struck)} "
                        f"| {pct([r.paged is not None for r in struck])} "
                        f"| {pct([r.named for r in struck])} | {latency(struck)} |",
                        flush=True,
                    )
    print(
        f"\n{args.seeds} seeds per row, horizon {args.horizon:g} simulated s; "
        f"{time.monotonic() - started:.0f} s wall."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rank churn: thousands of scheduler ranks arrive, report for a while and leave for good.

Each arriving rank reports the seed fault (a Mamba double free, so it carries a firing alert) every
``--period`` simulated seconds for ``--lifetime`` seconds, then falls silent (its pod was deleted).  The real
store, detector and alerting wiring run on a fake clock, evaluating every 5 s and rendering
``/metrics`` every minute.  With ``forget_after`` a departed rank is forgotten: its alerts resolve
with a reason and its state goes, so memory stays bounded; without it (``--forget-after 0``,
today's behaviour before issue 12) every departed rank keeps a firing stale alert and its history.

Goal (issue 12, item 11): store ranks, detector states and alerts bounded by
``arrival rate x (lifetime + forget_after + retention)``, RSS flat after the first forget window.

Run: ``python benchmarks/bench_churn.py [--arrivals 4000] [--every 2] [--lifetime 60] [--forget-after 600]``.
Figures, never asserts.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Iterator
from dataclasses import replace

from churn_rig import EPOCH, churn_rig, rss_mib  # benchmarks/churn_rig.py (on sys.path)
from prometheus_client import CollectorRegistry, generate_latest

from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.metrics.collectors import PoolCollector


def rank_snapshot(seed: Snapshot, n: int, seq: int, now: float) -> Snapshot:
    worker = replace(seed.worker, worker=f"decode-{n // 8}", tp_rank=n % 8)  # TP-8 pods
    return replace(seed, worker=worker, seq=seq, taken_at=now, boot_id=f"boot-{n}", source="probe")


def run(args: argparse.Namespace) -> Iterator[dict[str, float]]:
    """One row of figures every ``--report`` simulated seconds, as the simulation goes."""
    rig = churn_rig(args.forget_after if args.forget_after > 0 else 1e12)
    seed, clock, settings, store, alerting = rig.seed, rig.clock, rig.settings, rig.store, rig.alerting
    registry = CollectorRegistry()
    registry.register(PoolCollector(store, clock, settings.detection.stale_after))
    registry.register(alerting.collector)
    born: dict[int, float] = {}
    arrived, t = 0, 0
    # past the last departure by one forget window and the resolved alerts' retention
    end = args.arrivals * args.every + args.lifetime + int(args.forget_after or 600) + 960
    started = time.perf_counter()
    while t <= end:
        clock.now = EPOCH + t
        if arrived < args.arrivals and t % args.every == 0:
            born[arrived] = t
            arrived += 1
        for n in [n for n, b in born.items() if t - b >= args.lifetime]:
            del born[n]
        for n, b in born.items():
            if (t - b) % args.period == 0:
                store.put(rank_snapshot(seed, n, int(t - b) + 1, clock.now))
        if t % 5 == 0:
            alerts = alerting.evaluate(clock.now)
        if t % 60 == 0:
            size = len(generate_latest(registry))
        if t % args.report == 0 or t == end:
            gc.collect()
            sizes = alerting.detector.sizes()
            yield (
                {
                    "t": t,
                    "arrived": arrived,
                    "live": len(born),
                    "store_ranks": len(store),
                    "rank_sources": sizes["rank_sources"],
                    "alerts_held": sizes["alerts"],
                    "firing": sum(a.state.value == "firing" for a in alerts),
                    "metrics_kib": size / 1024,
                    "rss_mib": rss_mib(),
                    "wall_s": time.perf_counter() - started,
                }
            )
        t += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrivals", type=int, default=4000, help="ranks that arrive, one every --every s")
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--lifetime", type=int, default=60, help="seconds a rank reports before leaving")
    parser.add_argument("--period", type=int, default=5, help="seconds between a live rank's snapshots")
    parser.add_argument("--forget-after", type=float, default=600.0, help="0: never forget (the old way)")
    parser.add_argument("--report", type=int, default=1200, help="print a row every this many seconds")
    args = parser.parse_args()
    bound = (args.lifetime + args.forget_after + 900) / args.every if args.forget_after > 0 else float("inf")
    print(
        f"{args.arrivals} ranks, one every {args.every} s, each reporting every {args.period} s for "
        f"{args.lifetime} s; forget_after {args.forget_after:g} s (goal: <= {bound:.0f} ranks held; RSS flat)"
    )
    head = f"{'sim s':>7} {'arrived':>7} {'live':>5} {'store':>6} {'det.st':>6} {'alerts':>6} "
    print(head + f"{'firing':>6} {'/metrics KiB':>12} {'RSS MiB':>8} {'wall s':>7}", flush=True)
    for r in run(args):
        print(
            f"{r['t']:>7.0f} {r['arrived']:>7.0f} {r['live']:>5.0f} {r['store_ranks']:>6.0f} "
            f"{r['rank_sources']:>6.0f} {r['alerts_held']:>6.0f} {r['firing']:>6.0f} "
            f"{r['metrics_kib']:>12.1f} {r['rss_mib']:>8.1f} {r['wall_s']:>7.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

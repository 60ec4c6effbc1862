"""Hostile churn (issue 24 item 7): is memory returned when ranks go?

Two cases, figures only (never asserts):

* **churn**: 200 ranks with new worker names appear every second for 60 s and vanish a second
  later (12,000 ranks a cycle, each with the seed's firing double free), through the real store,
  detector, alerting and cached ``/metrics`` render on a fake clock (evaluated every 5 s, rendered
  every 15 s).  After each cycle the clock runs past ``forget_after`` and the resolved alerts'
  retention, so every rank is forgotten.  The first cycle warms the process (its allocations are
  the baseline); the RSS after each later cycle is compared with it (goal: within +-10 %).
* **20,000-rank log**: one SGLang log naming 20,000 ``TP<n>`` tags, read by the real log source
  into the store and rendered, with the cap (``POOLWATCH_MAX_LOG_RANKS``, default 1,024) and
  without it (``--uncapped-too``): ranks kept, ``/metrics`` size and render time, RSS growth.

Run: ``python benchmarks/bench_hostile_churn.py [--cycles 4] [--per-second 200] [--uncapped-too]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx
from churn_rig import EPOCH, Clock, churn_rig, rss_mib, settled_rss  # benchmarks/churn_rig.py (on sys.path)
from prometheus_client.exposition import choose_encoder

from poolwatch.model.rank import SourceKind
from poolwatch.model.snapshot import Snapshot
from poolwatch.settings.groups import IdentitySettings
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import build_exposition
from poolwatch.sidecar.store import SnapshotStore
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.sglang.log.dialect import DIALECT

FORGET_AFTER = 60.0
ENCODER = choose_encoder("")[0]  # the plain text format, as Prometheus gets it by default


def churn(args: argparse.Namespace) -> None:
    rig = churn_rig(FORGET_AFTER)
    seed, clock, settings, store, alerting = rig.seed, rig.clock, rig.settings, rig.store, rig.alerting
    exposition = build_exposition(store, clock, settings.detection.stale_after, [alerting.collector])
    quiet = int(FORGET_AFTER + settings.detection.retention + 30)  # forgotten, resolved and retired
    print(f"churn: {args.per_second} new ranks a second for {args.seconds} s, each gone a second "
          f"later; forget_after {FORGET_AFTER:g} s; goal: RSS after each cycle within +-10 % of the "
          "first")  # fmt: skip
    print(f"{'cycle':>5} {'peak ranks':>10} {'peak KiB':>9} {'RSS peak':>9} {'RSS after':>9} "
          f"{'vs cycle 1':>10} {'store':>6} {'alerts':>6} {'wall s':>7}", flush=True)  # fmt: skip
    baseline = 0.0
    t = 0
    for cycle in range(1, args.cycles + 1):
        started, peak_ranks, peak_kib, peak_rss = time.perf_counter(), 0, 0.0, 0.0
        for second in range(args.seconds + quiet):
            clock.now = EPOCH + t
            if second < args.seconds:
                for i in range(args.per_second):
                    worker = replace(seed.worker, worker=f"churn-{cycle}-{second}-{i}")
                    store.put(replace(seed, worker=worker, seq=1, taken_at=clock.now, boot_id=f"b{t}-{i}"))
            if t % 5 == 0:
                alerting.evaluate(clock.now)
            if t % 15 == 0:  # Prometheus's usual scrape interval
                body = exposition.render(ENCODER, clock.now)
                peak_kib = max(peak_kib, len(body) / 1024)
                peak_ranks = max(peak_ranks, len(store))
            if second == args.seconds:
                peak_rss = rss_mib()
            t += 1
        after = settled_rss()
        baseline = baseline or after
        sizes = alerting.detector.sizes()
        print(f"{cycle:>5} {peak_ranks:>10} {peak_kib:>9.0f} {peak_rss:>9.1f} {after:>9.1f} "
              f"{100 * (after / baseline - 1):>+9.1f}% {len(store):>6} {sizes['alerts']:>6} "
              f"{time.perf_counter() - started:>7.1f}", flush=True)  # fmt: skip


def write_log(path: Path, ranks: int) -> None:
    with path.open("w") as out:
        for tp in range(ranks):
            out.write(f"[2026-03-02 14:05:10 TP{tp}] Decode batch [1290], #running-req: 12, #full token: "
                      "20480, full token usage: 0.02, #queue-req: 0\n")  # fmt: skip


def log_case(ranks: int, cap: int) -> None:
    clock = Clock()
    clock.now = 4e9
    settings = Settings(identity=IdentitySettings(worker="bench"))
    store = SnapshotStore(history=settings.scrape.history, clock=clock)
    exposition = build_exposition(store, clock, 1e12)
    before = settled_rss()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "sglang.log"
        log.touch()  # followed from its start: every line is new, none left to the 1 MiB backfill
        source = LogSource(
            Target("log", SourceKind("sglang-log"), str(log), "w"),
            clock,
            DIALECT,
            max_read=64 << 20,
            max_ranks=cap,
        )
        write_log(log, ranks)

        async def read() -> list[Snapshot]:
            async with httpx.AsyncClient() as client:
                return [*await source.scrape(client), *await source.scrape(client)]

        try:
            for snap in asyncio.run(read()):
                store.put(snap)
        finally:
            source.close()
    started = time.perf_counter()
    body = exposition.render(ENCODER, clock.now)
    render_s = time.perf_counter() - started
    grown = settled_rss() - before
    print(f"{ranks:>7} {cap:>6} {len(store):>6} {len(body) / 1024:>10.0f} {render_s:>9.3f} {grown:>+10.1f}",
          flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--per-second", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--log-ranks", type=int, default=20_000)
    parser.add_argument("--uncapped-too", action="store_true", help="also read the log without the cap")
    args = parser.parse_args()
    churn(args)
    print(f"\nlog: {args.log_ranks} distinct TP tags in one SGLang log")
    print(f"{'tags':>7} {'cap':>6} {'ranks':>6} {'/metrics KiB':>10} {'render s':>9} {'RSS +MiB':>10}")
    log_case(args.log_ranks, Settings.from_env({}).limits.max_log_ranks)
    if args.uncapped_too:
        log_case(args.log_ranks, 65536)


if __name__ == "__main__":
    main()

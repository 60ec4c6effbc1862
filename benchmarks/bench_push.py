"""Wall-clock push path: fault in the scheduler thread -> probe publish -> long-poll wakes -> sidecar
detector -> delivery wakes -> webhook POST, for a surplus and for a deficit, on a busy rank.

A real probe (``poolwatch.probe.lifecycle.attach``, served on loopback) watches a small SGLang-shaped rank
(``rigs/fakes/sglang.py``); a "scheduler" thread calls the probe's loop hook every 10 ms (busy: a
running request), the real sidecar app (discovery, long-poll scrape loop, detector, webhook
notifier) runs in process.  Each repetition is a new rank (a new worker name):

* **surplus**: the seed double free (the chunked request's Mamba slot freed while it runs), seen by
  the chunk hook and published at once -> PoolwatchDoubleFree;
* **deficit**: a Mamba slot taken and never returned while busy -> PoolwatchSlotLeak after the
  detector's three samples (the probe samples every 0.1 s; a pending deficit changes the
  long-poll signature every sample, so the sidecar re-polls at that rate).

Prints per case the fault -> webhook latency (median / p99 / max) and the share within the goals
(surplus <= 0.2 s, deficit <= 0.5 s).  Run: ``python benchmarks/bench_push.py [--reps 25]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from webhook import Webhook  # benchmarks/webhook.py (this script's directory is on sys.path)

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from rigs.fakes.sglang import Rank

GOALS = {"surplus": 0.2, "deficit": 0.5}
ALERT = {"surplus": "PoolwatchDoubleFree", "deficit": "PoolwatchSlotLeak"}


def busy_rank() -> Rank:
    rank = Rank(kv=256, mamba=32, rows=8)
    rank.running("a", origin=20, outputs=2)
    return rank


async def one(case: str, i: int, directory: Path, hook: Webhook) -> float | None:
    worker = f"{case}-{i}"
    rank = busy_rank()
    if case == "surplus":
        req = rank.chunked("long", origin=40, chunk=16)
    config = ProbeConfig(directory=str(directory), worker=worker, release="0.5.4.post1")
    probe = attach(SGLANG, rank.sched, replace(config, sample_interval_s=0.1))
    stop = threading.Event()

    def scheduler() -> None:  # the scheduler thread: a loop boundary every 10 ms
        while not stop.is_set():
            probe.on_loop_boundary("recv_requests")
            time.sleep(0.01)

    thread = threading.Thread(target=scheduler, daemon=True)
    thread.start()
    await asyncio.sleep(4.0)  # the sidecar discovers the rank and starts watching it
    fault = time.monotonic()
    if case == "surplus":
        assert req.mamba_pool_idx is not None
        rank.mamba.free(req.mamba_pool_idx.reshape(1))  # in the scheduler, then its chunk hook
        probe.after_prefill_chunk("process_prefill_chunk")
    else:
        rank.mamba.take()  # a slot nobody will ever give back
    paged = None
    while time.monotonic() - fault < 5.0 and paged is None:
        await asyncio.sleep(0.005)
        paged = hook.first(ALERT[case], worker)
    stop.set()
    thread.join()
    detach(rank.sched)
    return None if paged is None else paged - fault


async def run(reps: int) -> dict[str, list[float | None]]:
    hook = Webhook(time.monotonic)
    out: dict[str, list[float | None]] = {"surplus": [], "deficit": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"POOLWATCH_PROBE_DIR": tmp, "POOLWATCH_WEBHOOK_URLS": hook.url, "POOLWATCH_WORKER": "bench"}
        app = create_app(Settings.from_env(env))
        async with app.router.lifespan_context(app):
            for i in range(reps):
                for case, runs in out.items():
                    runs.append(await one(case, i, Path(tmp), hook))
    hook.server.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=25)
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.reps))
    print("| case | runs | paged | fault -> webhook median / p99 / max, s | within goal |")
    print("|---|---|---|---|---|")
    for case, lat in results.items():
        got = sorted(x for x in lat if x is not None)
        p99 = got[min(len(got) - 1, int(0.99 * len(got)))] if got else None
        stats = f"{statistics.median(got):.3f} / {p99:.3f} / {got[-1]:.3f}" if got else "—"
        within = sum(1 for x in got if x <= GOALS[case])
        print(
            f"| {case} ({ALERT[case]}) | {len(lat)} | {len(got)} | {stats} "
            f"| {100 * within / len(lat):.0f} % <= {GOALS[case]:g} s |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

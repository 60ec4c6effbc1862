"""The probe's endpoint under hostile clients: emulated scheduler steps per second with 0 vs 200
clients long-polling the probe (goal: at most 2 % slower), plus 200 clients hammering ``wait=0``.

Run: ``python benchmarks/bench_hostile.py``.  One emulated unified rank (64 live requests) runs
the real probe with default settings, served on 127.0.0.1 as inside SGLang.  The clients run in
another process (as a hostile local process would): each keeps one HTTP/1.1 connection, long-polls
``/v1/snapshot`` with the signature it last saw (``wait=30``), and reconnects at once after a 503
or a closed connection.  Conditions alternate (0, 200, 200, 0, 0, 200, ...: which goes first
alternates too) and each round's two windows are compared with each other: the figure beside the
goal is the median of the rounds' ratios (with their interquartile range), so a slow spell of the
shared machine does not land on one side only.
Two steadier figures come with it: the scheduler thread's own CPU time per step (``thread_time``:
what the clients add to the scheduler's work, whatever the neighbours do) and the endpoint threads'
CPU share (an upper bound on what they can take from the scheduler through the interpreter lock).
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig

STEPS = 16_000  # per window (~2-4 s here): shorter windows measure the neighbours, not the clients
ROUNDS = 7
CLIENTS = 200
GOAL_PCT = 2.0


def client_loop(port: int, stop: threading.Event, wait: str, tally: Counter[int]) -> None:
    """One hostile client: long-poll (or hammer) until ``stop``, reconnecting after any refusal."""
    from poolwatch.codec.snapshot import parse_snapshot
    from poolwatch.conservation import signature

    sig = ""
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=35)
        try:
            while not stop.is_set():
                conn.request("GET", f"/v1/snapshot?sig={sig}&wait={wait}")
                resp = conn.getresponse()
                body = resp.read()
                tally[resp.status] += 1
                if resp.status == 200:
                    sig = signature(parse_snapshot(json.loads(body)))
                if resp.getheader("Connection", "").lower() == "close":
                    break
        except (OSError, http.client.HTTPException):
            tally[0] += 1
        finally:
            conn.close()


def clients_main(port: int, wait: str) -> None:
    """The client process: ``CLIENTS`` threads until stdin closes; prints the tally of statuses."""
    stop, tally = threading.Event(), Counter[int]()
    for _ in range(CLIENTS):
        threading.Thread(target=client_loop, args=(port, stop, wait, tally), daemon=True).start()
    sys.stdin.read()
    stop.set()
    print(json.dumps(dict(tally)), flush=True)
    os._exit(0)  # long-polls still in flight are simply dropped, as a killed client's would be


def emulated_rank() -> Cluster:
    """The same rank for every window (a fixed seed): one 10 s burst of arrivals fills 64 running
    slots, then none come and none finish within a window, so every window does the same work."""
    shape = ModelShape(
        full_kv_tokens=1_000_000, mamba_slots=200, max_running_requests=64, context_len=100_000
    )
    load = WorkloadConfig(rate=16.0, prompt_median=200, output_median=50_000, output_sigma=0.1,
                          abort_fraction=0.0, gap_s=1e9, burst_s=10.0)  # fmt: skip
    cluster = Cluster(
        ClusterConfig(prefill=0, decode=0, unified=1, shape=shape, workload=load, dt=0.05, seed=3)
    )
    rank = cluster.schedulers[0]
    cluster.run_until(lambda: len(rank.running_batch.reqs) >= 64, 50_000)
    return cluster


def config(directory: str) -> ProbeConfig:
    """Default sampling (every 0.1 s) and serving; censuses far apart, so every window measures
    the scheduler, the samples and the endpoint -- not a census that happens to land in one."""
    return ProbeConfig(
        directory=directory,
        census_interval_s=1e9,
        kv_census_interval_s=1e9,
        idle_kv_census_gap_s=1e9,
        release="0.5.4.post1",
        worker="bench",
    )


def endpoint_cpu_s() -> float:
    """CPU seconds used so far by the probe endpoint's threads (Linux ``/proc``): what they can
    take from the scheduler thread, whatever else the machine is running."""
    ticks = 0
    for thread in threading.enumerate():
        if thread.name.startswith("poolwatch-probe") and thread.native_id is not None:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def window(directory: str, wait: str | None) -> tuple[float, float, float, Counter[str]]:
    """Steps per second of a fresh rank over ``STEPS`` steps, with clients (``wait``) or none; the
    endpoint threads' CPU share; the scheduler thread's CPU seconds per step."""
    cluster = emulated_rank()
    rank = cluster.schedulers[0]
    probe = attach(SGLANG, rank, config(directory))
    tally = Counter[str]()
    try:
        assert probe.publisher is not None
        assert probe.publisher.server is not None
        port, proc = probe.publisher.server.port, None
        if wait is not None:
            argv = [sys.executable, __file__, "--clients", str(port), wait]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the clients connect and settle into their polls (the same pause without)
        start, cpu, own = time.perf_counter(), endpoint_cpu_s(), time.thread_time()
        cluster.run_steps(STEPS)
        elapsed, own = time.perf_counter() - start, time.thread_time() - own
        rate, share = STEPS / elapsed, (endpoint_cpu_s() - cpu) / elapsed
        if proc is not None:
            out, _ = proc.communicate("", timeout=60)
            tally.update({k: int(v) for k, v in json.loads(out).items()})
    finally:
        detach(rank)
    return rate, share, own / STEPS, tally


@dataclass
class Row:
    """One condition's figures over ``ROUNDS`` alternating pairs of windows."""

    quiet: list[float] = field(default_factory=list)  # steps/s without clients
    hostile: list[float] = field(default_factory=list)  # steps/s with them, same round
    cpu_ratio: list[float] = field(default_factory=list)  # scheduler CPU per step, with / without
    shares: list[float] = field(default_factory=list)  # endpoint threads' CPU share, with clients
    tally: Counter[str] = field(default_factory=Counter)

    def slower_pct(self) -> tuple[float, float, float]:
        """Median and interquartile range of the rounds' slowdowns (1 - hostile / quiet), in %."""
        pct = [(1 - h / q) * 100 for q, h in zip(self.quiet, self.hostile, strict=True)]
        q1, med, q3 = statistics.quantiles(pct, n=4, method="inclusive")
        return med, q1, q3


def measure(directory: str, wait: str) -> Row:
    row = Row()
    for i in range(ROUNDS):  # ABBA: which condition goes first alternates from round to round
        if i % 2:
            hostile, share, own_hostile, seen = window(directory, wait)
            rate, _, own, _ = window(directory, None)
        else:
            rate, _, own, _ = window(directory, None)
            hostile, share, own_hostile, seen = window(directory, wait)
        row.quiet.append(rate)
        row.hostile.append(hostile)
        row.cpu_ratio.append(own_hostile / own)
        row.shares.append(share)
        row.tally.update(seen)
    return row


def verdict(slower: float, high: float, cpu: float) -> str:
    """The goal judged on both the wall-clock median and the scheduler thread's CPU per step:
    met when both are within it ("noisy" when a quarter of the rounds are past it), not met when
    both are past it, else inconclusive (the two measures disagree on this machine)."""
    if slower <= GOAL_PCT and cpu <= GOAL_PCT:
        return "met" if high <= GOAL_PCT else "met, noisy"
    return "NOT met" if slower > GOAL_PCT and cpu > GOAL_PCT else "inconclusive"


def main() -> int:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as directory:
        rows = [
            (name, measure(directory, wait))
            for name, wait in (("long-poll wait=30", "30"), ("hammer wait=0", "0"))
        ]
    print(f"load average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; {ROUNDS} rounds")
    head = "steps/s 0 | steps/s N | slower: median [IQR]    | goal   | verdict      | sched CPU/step"
    head += " | endpoint CPU"
    print(f"{'clients':>28} | {head}")
    for name, row in rows:
        slower, low, high = row.slower_pct()
        share, cpu = statistics.median(row.shares), (statistics.median(row.cpu_ratio) - 1) * 100
        cells = (
            f"{statistics.median(row.quiet):9.0f} | {statistics.median(row.hostile):9.0f} | "
            f"{slower:+5.1f}% [{low:+5.1f}, {high:+5.1f}] | <= {GOAL_PCT:.0f} % | "
            f"{verdict(slower, high, cpu):12} | {cpu:+13.1f}% | {share * 100:8.2f} %"
        )
        print(f"{f'{CLIENTS} x {name}':>28} | {cells}")
        tally = dict(sorted(row.tally.items()))
        print(f"{'':>28}   answers seen by the clients (0 = refused/reset): {tally}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--clients"]:
        clients_main(int(sys.argv[2]), sys.argv[3])
        raise SystemExit(0)
    raise SystemExit(main())

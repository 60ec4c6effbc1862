"""Issue 34's hostile neighbour and hostile receivers, measured against a real ``poolwatch serve``.

Run: ``.venv/bin/python benchmarks/bench_hostile_neighbour.py`` (about 3 minutes; as root the
neighbour and the receivers run as uid ``nobody`` through ``setpriv``, else as this user).

1. **A restarting sidecar's time to its first snapshot under the connection hog** (goal <= 2 s).
   One emulated SGLang rank (0.5.4.post1, the real probe attached, served on 127.0.0.1) and a
   neighbour without the secret: 64 threads in a process of their own, each holding one probe
   connection and opening a new one the moment it is closed, never sending a byte.  The sidecar is
   started ``--restarts`` times; each time the figures are from its ``/healthz`` answering (it
   serves) and from its process start to the rank's first snapshot in ``/api/v1/workers``, and
   whether its first scrape of the probe failed.  The same without the neighbour is the baseline
   (the scrape loop spreads its targets over the first interval: up to 1 s by design).
2. **The sidecar's RSS against hostile receivers** (goal: bounded, within the manifest's 256 MiB).
   A snapshot file with the seed's double free keeps an alert firing and re-sent every second to
   an Alertmanager that answers 200 with an endless body and to a webhook that answers one byte
   every 2 s; a third receiver records what it gets.  The sidecar's RSS is sampled every 0.5 s
   for ``--seconds``; it runs under an address-space limit of ``--limit-mib`` (the manifest's memory
   limit stands in for the kernel's OOM killer: past it the process gets a MemoryError and dies).

Prints figures; asserts nothing (a shared machine).  To measure the code before a change, run this
file with ``PYTHONPATH`` pointing at that checkout's ``service`` directory.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostile_processes import neighbour, sidecar, until  # benchmarks/ (this script's directory)

from rigs.neighbours import HOG, RECEIVERS

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "tests" / "fixtures" / "seed-snapshot.json"
LIMITED = """
import resource, sys
limit = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from poolwatch.cli import main
sys.exit(main(["serve"]))
"""


def one_restart(probe_dir: Path, log: Path) -> tuple[float, float, bool]:
    """(serving -> first snapshot, start -> first snapshot, whether the first scrape failed)."""
    env = {
        "POOLWATCH_PROBE_DIR": str(probe_dir),
        "POOLWATCH_WORKER": "bench",
        "POOLWATCH_LOG_LEVEL": "warning",
    }
    with sidecar(env, log) as (url, _, started):
        serving = until(lambda: httpx.get(f"{url}/healthz", timeout=1).status_code == 200)
        first = until(lambda: httpx.get(f"{url}/api/v1/workers", timeout=1).json(), timeout=90)
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
    failed = any(
        line.startswith("poolwatch_target_scrape_errors_total{") and not line.endswith(" 0.0")
        for line in metrics.splitlines()
    )
    return first - serving, first - started, failed


def emulated_rank() -> Any:
    """One unified 0.5.4.post1 rank, busy with 16 requests (the emulator: torch's CPU build)."""
    from poolwatch_emulator import Cluster, ClusterConfig, ModelShape, WorkloadConfig

    shape = ModelShape(full_kv_tokens=200_000, mamba_slots=64, max_running_requests=16, context_len=20_000)
    load = WorkloadConfig(rate=8.0, prompt_median=200, output_median=5_000, abort_fraction=0.0)
    cluster = Cluster(
        ClusterConfig(prefill=0, decode=0, unified=1, shape=shape, workload=load, dt=0.05, seed=3)
    )
    rank = cluster.schedulers[0]
    cluster.run_until(lambda: len(rank.running_batch.reqs) >= 8, 50_000)
    return cluster


def first_snapshots(restarts: int) -> None:
    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.lifecycle import attach, detach
    from poolwatch.probe.sglang.engine import SGLANG

    work = Path(tempfile.mkdtemp(prefix="bench-neighbour-"))
    cluster = emulated_rank()
    rank = cluster.schedulers[0]
    config = ProbeConfig(directory=str(work / "probe"), release="0.5.4.post1", worker="bench")
    probe = attach(SGLANG, rank, config)
    stop = threading.Event()
    stepper = threading.Thread(target=lambda: _step(cluster, stop), daemon=True)
    stepper.start()
    try:
        assert probe.publisher is not None
        assert probe.publisher.server is not None
        port = str(probe.publisher.server.port)
        rows = {}
        for label, hog in (("no neighbour", False), ("connection hog, 64 threads", True)):
            with contextlib.ExitStack() as stack:
                if hog:
                    assert stack.enter_context(neighbour(HOG, port, "64")) == "holding"
                    time.sleep(1.0)  # every place held before the sidecar starts
                log = work / f"sidecar-{len(rows)}.log"
                rows[label] = [one_restart(work / "probe", log) for _ in range(restarts)]
    finally:
        stop.set()
        stepper.join(timeout=10)
        detach(rank)
        shutil.rmtree(work, ignore_errors=True)
    print(f"1. a restarting sidecar's first snapshot ({restarts} restarts each; goal <= 2 s under the hog)\n")
    head = f"{'serving -> snapshot':>24} {'start -> snapshot':>22} {'first scrape failed':>20}"
    print(f"{'':28} {head}\n{'':28} {'median / max':>24} {'median / max':>22}")
    for label, runs in rows.items():
        a, b = [r[0] for r in runs], [r[1] for r in runs]
        failed = sum(r[2] for r in runs)
        figures = (
            f"{statistics.median(a):13.2f} / {max(a):5.2f} s {statistics.median(b):11.2f} / {max(b):5.2f} s"
        )
        print(f"{label:28} {figures} {failed:>14} / {len(runs)}")


def _step(cluster: Any, stop: threading.Event) -> None:
    """The scheduler, stepping as SGLang's would (the probe samples at its loop boundaries)."""
    while not stop.is_set():
        cluster.run_steps(20)
        time.sleep(0.005)


class Recorder(BaseHTTPRequestHandler):
    got = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.got += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def hostile_receivers(seconds: float, limit_mib: int) -> None:
    good = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp(prefix="bench-receivers-"))
    try:
        with neighbour(RECEIVERS) as ports:
            endless, trickle = ports.split()
            env = {
                "POOLWATCH_WORKER": "bench",
                "POOLWATCH_SNAPSHOT_FILES": str(SEED),
                "POOLWATCH_ALERTMANAGER_URLS": f"http://127.0.0.1:{endless}",
                "POOLWATCH_WEBHOOK_URLS": f"http://127.0.0.1:{trickle}/hook,http://127.0.0.1:{good.server_address[1]}/hook",
                "POOLWATCH_RESEND_INTERVAL": "1",
                "POOLWATCH_LOG_LEVEL": "warning",
            }
            argv = [sys.executable, "-c", LIMITED, str(limit_mib)]
            peak, alive, samples = 0.0, True, []
            with sidecar(env, work / "sidecar.log", argv) as (url, pid, started):
                while time.monotonic() - started < seconds:
                    time.sleep(0.5)
                    rss = rss_mib(pid)
                    if rss == 0.0:
                        alive = False
                        break
                    samples.append(rss)
                    peak = max(peak, rss)
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(f"{url}/healthz", timeout=2)
            log = (work / "sidecar.log").read_text(errors="replace")
        print(
            f"\n2. the sidecar's RSS against an endless-body Alertmanager and a trickling webhook "
            f"({seconds:g} s, re-sent every 1 s; address space limited to {limit_mib} MiB)\n"
        )
        steady = statistics.median(samples[len(samples) // 2 :]) if samples else 0.0
        print(
            f"peak RSS {peak:.0f} MiB, median over the second half {steady:.0f} MiB, "
            f"alive at the end: {alive}"
        )
        print(
            f"deliveries to the third receiver: {Recorder.got}; "
            f"MemoryError in the log: {'MemoryError' in log}"
        )
        cut = log.count("no complete answer within")
        print(f"attempts cut at the delivery deadline logged: {cut} (logged once per outage)")
    finally:
        good.shutdown()
        good.server_close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--limit-mib", type=int, default=1024, help="the sidecar's address-space limit")
    args = parser.parse_args(argv)
    first_snapshots(args.restarts)
    hostile_receivers(args.seconds, args.limit_mib)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""bench_page's child process: the emulated cluster the fault strikes, with a probe on every rank.

``python benchmarks/page_cluster.py SPEC`` (``SPEC`` a JSON object :func:`bench_page.one_run`
writes): builds ``detection_cases.cases()``'s deployment of the case, the fault at step 40 after
``warm_steps`` more, serves each worker's ``/metrics`` and attaches the probes, says ``probes:
ready``, waits for the parent's ``go`` file and runs at ``time_scale``.  It prints one JSON line
per event, stamped with the wall clock: ``fault`` the moment the fault strikes (a hook on the rank's
fault counter, in the scheduler thread; for the *unreachable* variant the worker's probe endpoints
are stopped right there) and ``crash`` when a worker crashes (polled every 5 ms).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detection_cases import cases  # benchmarks/ (this script's directory is on sys.path)

from poolwatch.probe.lifecycle import probe_of
from poolwatch_emulator import Cluster, WorkerServer, attach_probes, parse_fault
from rigs.stack.processes import poll

STARTUP = 60.0  # wall seconds for the fault to strike after the emulator starts


def emit(event: str, worker: str) -> None:
    print(json.dumps({"event": event, "worker": worker, "t": time.time()}), flush=True)


def silence(worker: Any) -> None:
    """Stop every probe endpoint of ``worker``'s ranks (its discovery files and final snapshots stay)."""
    for rank in worker.ranks:
        probe = probe_of(rank)
        server = getattr(getattr(probe, "publisher", None), "server", None)
        if server is not None:
            server.stop()


class Tripped(Counter[str]):
    """A rank's fault counter that reports the fault the moment it strikes (and, for the
    unreachable variant, silences the worker's probes before the probe's next hook runs)."""

    def __init__(self, worker: Any, fault: str, unreachable: bool, struck: set[str]) -> None:
        super().__init__()
        self.worker, self.fault, self.unreachable, self.struck = worker, fault, unreachable, struck

    def __setitem__(self, key: str, value: int) -> None:
        if key == self.fault and self.worker.name not in self.struck:
            self.struck.add(self.worker.name)
            if self.unreachable:
                silence(self.worker)
            emit("fault", self.worker.name)
        super().__setitem__(key, value)


def child(spec: dict[str, Any]) -> int:
    c = {x.name: x for x in cases()}[spec["case"]]
    root = Path(spec["root"])
    workload = replace(c.config.workload, rate=c.config.workload.rate * spec["load"])
    fault = parse_fault(f"{c.fault}@step={40 + spec['warm_steps']}")  # bench_detection's step 40, warmed
    config = replace(
        c.config,
        workload=workload,
        faults=(fault,),
        seed=spec["seed"],
        epoch=None,
        log_dir=root / "sglang-logs",
    )
    cluster = Cluster(config)
    assert [w.name for w in cluster.workers] == spec["pods"], [w.name for w in cluster.workers]
    servers = [WorkerServer(w, spec["port_base"] + i).start() for i, w in enumerate(cluster.workers)]
    attach_probes(cluster, Path(spec["probe_dir"]))
    struck: set[str] = set()  # workers the fault struck (one report each; TP ranks strike alike)
    for worker in cluster.workers:
        for rank in worker.ranks:
            rank.faults.fired = Tripped(worker, c.fault, spec["unreachable"], struck)
    print("probes: ready", flush=True)
    go = root / "go"
    poll(lambda: go.exists() or None, timeout=STARTUP, what="the stack", every=0.05)
    crashed: set[str] = set()
    cluster.start(spec["time_scale"])
    deadline = time.monotonic() + spec["limit"]
    try:
        while time.monotonic() < deadline:
            for worker in cluster.workers:
                if worker.crashed and worker.name not in crashed:
                    crashed.add(worker.name)
                    emit("crash", worker.name)
                    silence(worker)  # the process is gone
            time.sleep(0.005)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        for server in servers:
            server.stop()
        for worker in cluster.workers:
            silence(worker)
    return 0


if __name__ == "__main__":
    raise SystemExit(child(json.loads(sys.argv[1])))

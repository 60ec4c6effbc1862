"""The page as the on-call engineer receives it (issue 23): fault -> received notification, per
fault class and load, through the stack as deployed.

Each run starts, on 127.0.0.1 only, a fresh copy of what :mod:`rigs.stack.launch`
starts (and with its helpers): one sidecar per pod with the environment and arguments of the
rendered PD example (:mod:`rigs.stack.deployed`), real Prometheus with the rendered rules and
PodMonitor scrape, real Alertmanager with ``deploy/alertmanager/alertmanager.yaml`` and its
templates, every receiver (webhook, Slack, PagerDuty) pointed at a loopback recorder.  The
emulated cluster is ``bench_detection.cases()``'s deployment of the fault class (the fault strikes
at step 40; traffic at 0.5x, 1x, 2x its rate; ``--seed``-th run seeded ``seed + i``), run in a child
process at ``--time-scale`` simulated seconds per wall second with the probe on every rank; a
unified worker gets the prefill pod's sidecar configuration (the PD example has no unified pod).
The child reports the wall time the fault strikes (a hook on the rank's fault counter, in the
scheduler thread) and the time a worker crashes (polled every 5 ms).

Per cell it prints: runs where the fault struck, runs whose worker crashed within the watch, % of
struck runs whose **received** page (the first webhook notification of the fault's alert for that
pool and worker) arrived before the crash (or with no crash in the watch), % whose received Slack
text names pool, rank and slot ids, fault -> page latency (median, max, wall s) and page -> text
with ids (median, max).  The *probe unreachable* row: the struck worker's probe endpoints stop
answering at the fault (their servers are stopped inside the fault hook), so the page can only
come from the final snapshot the probe writes before SGLang's idle check raises: % paged with the
exact cause (the Slack text names pool, rank and slot ids) and crash -> page latency.

A time scale above 1 brings the crash sooner in wall time while Alertmanager and Prometheus keep
their wall-clock timers, so "before the crash" is pessimistic here.

Run: ``python benchmarks/bench_page.py [--runs 10] [--until-struck] [--quick] [--only CLASS]
[--case light] [--loads 0.5,1,2] [--time-scale 4]`` (``--case light --runs 10``: the seed under
light load and the unreachable variant, 10 seeded runs each).  ``--engine vllm [--runs 5]
[--loads busy,light]``: a real vLLM server on CPU with an injected double free instead of the
emulated cluster (``bench_page_vllm.py``).
Figures, never asserts.  Needs ``prometheus`` and ``prometheus-alertmanager`` on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_detection import SIGN, Case, cases  # benchmarks/ (this script's directory is on sys.path)
from page_figures import pct, retried, spread

from poolwatch.artifacts.notification_text import UPDATE_MARK
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import probe_of
from poolwatch_emulator import Cluster, WorkerServer, attach_probes, parse_fault
from poolwatch_emulator.faults import FAULTS
from rigs.stack import deployed
from rigs.stack.launch import (
    pods_from_manifests,
    start_alertmanager,
    start_prometheus,
    start_sidecar,
)
from rigs.stack.processes import Process, free_ports, http_ok, poll
from rigs.stack.prometheus import Prometheus
from rigs.stack.receivers import Post, WebhookRecorder

LOADS = (0.5, 1.0, 2.0)
SEED_FAULT = "pd-chunked-mamba-double-free"
R = TypeVar("R")
IDS = re.compile(r"(?:slot|page)s?(?:\(s\))? \[\d")
STARTUP = 60.0  # wall seconds for the fault to strike after the emulator starts


# --- the child: the emulated cluster -----------------------------------------------------------


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


# --- the parent: one run through the deployed stack --------------------------------------------


@dataclass
class Run:
    struck: float | None = None
    worker: str = ""
    crashed: float | None = None
    paged: float | None = None  # first webhook notification of the fault's alert
    text: float | None = None  # first Slack text naming pool and rank
    ids: float | None = None  # first Slack text naming pool, rank and slot ids
    update: float | None = None  # first Slack "[UPDATE]" naming them (ids learned after the page)
    incidents: set[str] = field(default_factory=set)  # PagerDuty dedup_keys of the fault's events
    notes: list[str] = field(default_factory=list)


def pod_names(c: Case) -> list[str]:
    cfg = c.config
    return [
        f"{role}-{i}"
        for role, n in (("prefill", cfg.prefill), ("unified", cfg.unified), ("decode", cfg.decode))
        for i in range(n)
    ]


def events(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [json.loads(x) for x in lines if x.startswith('{"event"')]


def observe_slack(run: Run, post: Post, alert: str, pool: str) -> None:
    """A Slack message about the fault's alert on the run's worker: text, slot ids, update."""
    attachment = post.body.get("attachments", [{}])[0]
    text = str(attachment.get("text", ""))
    if f"pod {run.worker}," not in text or alert not in text or f"pool {pool}" not in text:
        return
    if "rank dp " in text:
        run.text = min(run.text or post.received_at, post.received_at)
        if IDS.search(text):
            run.ids = min(run.ids or post.received_at, post.received_at)
            if str(attachment.get("title", "")).startswith(UPDATE_MARK):
                run.update = min(run.update or post.received_at, post.received_at)


def observe(run: Run, log: Path, hooks: WebhookRecorder, fault: str) -> None:
    """Fill ``run`` from the child's events and what the receivers got so far."""
    for e in events(log):
        if e["event"] == "fault" and run.struck is None:
            run.struck, run.worker = e["t"], e["worker"]
        if e["event"] == "crash" and e["worker"] == run.worker and run.crashed is None:
            run.crashed = e["t"]
    if run.struck is None:
        return
    info = FAULTS[fault]
    alert = SIGN[info.sign]
    for post in list(hooks.posts):
        if "/slack/" in post.path:
            observe_slack(run, post, alert, info.pool)
        elif "/pagerduty/" in post.path:
            summary = str(post.body.get("payload", {}).get("summary", ""))
            if f"{alert} " in summary and f"/{run.worker} {info.pool} pool" in summary:
                run.incidents.add(str(post.body.get("dedup_key")))
        else:
            for a in post.body.get("alerts", []):
                labels = a["labels"]
                if a["status"] == "firing" and (
                    labels["alertname"],
                    labels.get("pool"),
                    labels.get("worker"),
                ) == (alert, info.pool, run.worker):
                    run.paged = min(run.paged or post.received_at, post.received_at)


def finished(run: Run, now: float, limit: float, started: float) -> bool:
    if run.struck is None:
        return now > started + STARTUP
    if now > run.struck + limit:
        return True
    if run.paged is not None and run.ids is not None:  # and the crash seen, or 3 s without one
        return run.crashed is not None or now > run.paged + 3.0
    return run.crashed is not None and now > run.crashed + 8.0  # the window after a crash


def watching(port: int) -> bool | None:
    """True once the sidecar on ``port`` has found its pod's probes (they answer once SGLang runs)."""
    try:
        targets = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return None
    probes = [t for t in targets if "probe" in t["source"]]
    return True if probes and all(t["scrapes"] or t["last_error"] for t in probes) else None


def scraped(prom: Prometheus, n: int) -> bool | None:
    """True once Prometheus has scraped all ``n`` sidecars."""
    return True if len(prom.query("up == 1")) >= n else None


def one_run(c: Case, load: float, seed: int, unreachable: bool, args: argparse.Namespace) -> Run:
    rendered = deployed.render()
    names = pod_names(c)
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp, contextlib.ExitStack() as cleanup:
        root = Path(tmp)
        (root / "sglang-logs").mkdir()
        hooks = WebhookRecorder()
        cleanup.callback(hooks.stop)
        am_url, am_log = start_alertmanager(cleanup, root, hooks)
        am_port, port_base = int(am_url.rsplit(":", 1)[1]), free_ports(len(names))
        roles = {n: "decode" if n.startswith("decode") else "prefill" for n in names}
        pods = pods_from_manifests(root, rendered, am_port, port_base, roles)
        logs = [am_log] + [start_sidecar(cleanup, root, p) for p in pods]
        for pod in pods:
            ready = functools.partial(http_ok, f"http://127.0.0.1:{pod.port}/readyz")
            poll(ready, timeout=60, what=f"the sidecar of {pod.name}", logs=logs)
        prom, _ = start_prometheus(cleanup, root, rendered, pods, am_port)
        spec = {
            "case": c.name,
            "load": load,
            "seed": seed,
            "root": str(root),
            "pods": names,
            # the SGLang container's POOLWATCH_PROBE_DIR, on the pod's volume (the sidecar's, moved)
            "probe_dir": pods[0].env["POOLWATCH_PROBE_DIR"].replace(f"/{pods[0].name}/", "/{worker}/"),
            "port_base": port_base,
            "time_scale": args.time_scale,
            "unreachable": unreachable,
            "warm_steps": args.warm_steps,
            "limit": STARTUP + args.limit + 10.0,
        }
        log = root / "emulator.log"
        emulator = Process("emulator", [sys.executable, __file__, "--child", json.dumps(spec)], log)
        emulator.stop_signal = signal.SIGINT
        cleanup.callback(emulator.stop)
        emulator.start()
        poll(
            lambda: "probes: ready" in log.read_text() or None,
            timeout=STARTUP,
            what="the emulator",
            logs=[log],
        )
        for pod in pods:
            poll(
                functools.partial(watching, pod.port), timeout=STARTUP, what=f"{pod.name}'s probes", logs=logs
            )
        poll(lambda: scraped(prom, len(pods)), timeout=STARTUP, what="Prometheus' scrapes", logs=logs)
        (root / "go").touch()
        started, run = time.time(), Run()
        while not finished(run, time.time(), args.limit, started) and emulator.alive():
            time.sleep(0.05)
            observe(run, log, hooks, c.fault)
        if run.struck is None:
            run.notes.append(f"no fault ({'emulator exited' if not emulator.alive() else 'timeout'})")
        return run


# --- the table --------------------------------------------------------------------------------


def row(name: str, load: float, runs: list[Run]) -> str:
    struck = [r for r in runs if r.struck is not None]
    crashed = [r for r in struck if r.crashed is not None]
    before = [r for r in struck if r.paged is not None and (r.crashed is None or r.paged < r.crashed)]
    exact = [r for r in struck if r.ids is not None]
    latency = [r.paged - r.struck for r in struck if r.paged is not None and r.struck is not None]
    # the Slack and webhook posts of one flush arrive in either order: a text 1 ms early counts 0
    ids_after = [max(0.0, r.ids - r.paged) for r in struck if r.ids is not None and r.paged is not None]
    late = [r.paged - r.crashed for r in struck if r.paged is not None and r.crashed is not None]
    late = [x for x in late if x >= 0]
    return (
        f"| {name} | {load:g}x | {len(struck)}/{len(runs)} | {len(crashed)} "
        f"| {pct(len(before), len(struck))} | {pct(len(exact), len(struck))} "
        f"| {spread(latency)} | {spread(late)} | {spread(ids_after)} |"
    )


def census_interval(pool: str) -> float:
    """The busy census interval of ``pool`` (wall s: the probe's clock is the wall clock here), the
    defaults the manifests keep: Mamba 10 s, full KV and SWA 300 s (probe/core/config.py)."""
    defaults = ProbeConfig()
    return defaults.census_interval_s if pool == "mamba" else defaults.kv_census_interval_s


def update_row(name: str, pool: str, load: float, runs: list[Run]) -> str:
    """Leaks and SWA: when the slot ids reach the receiver, after the first page."""
    struck = [r for r in runs if r.struck is not None and r.paged is not None]
    after = [max(0.0, r.ids - r.paged) for r in struck if r.ids is not None and r.paged is not None]
    interval = census_interval(pool)
    within = [x for x in after if x <= interval]
    first = [r for r in struck if r.ids is not None and r.update is None]
    incidents = max((len(r.incidents) for r in struck), default=0)
    return (
        f"| {name} | {load:g}x | {len(struck)}/{len(runs)} | {pct(len(first), len(struck))} "
        f"| {pct(len([r for r in struck if r.update is not None]), len(struck))} | {spread(after)} "
        f"| {interval:g} s | {pct(len(within), len(struck))} | {incidents} |"
    )


def unreachable_row(runs: list[Run]) -> str:
    struck = [r for r in runs if r.struck is not None]
    crashed = [r for r in struck if r.crashed is not None]
    exact = [r for r in crashed if r.ids is not None]
    late = [r.ids - r.crashed for r in exact if r.ids is not None and r.crashed is not None]
    within = [x for x in late if x <= 1.0]
    return (
        f"| {SEED_FAULT} (busy), probe unreachable from the fault | 1x | {len(struck)}/{len(runs)} "
        f"| {len(crashed)} | {pct(len(exact), len(crashed))} | {pct(len(within), len(crashed))} "
        f"| {spread(late)} |"
    )


def progress(run: Run) -> str:
    if run.struck is None:
        return "not struck"
    paged = "not paged" if run.paged is None else f"paged {run.paged - run.struck:.2f} s after the fault"
    return f"struck, {paged}{', crashed' if run.crashed is not None else ''}"


def tried_run(c: Case, load: float, seed: int, unreachable: bool, args: argparse.Namespace) -> Run:
    """One run (:func:`retried`); a run whose stack failed three times is one with no strike."""
    attempt = functools.partial(one_run, c, load, seed, unreachable, args)
    run = retried(f"{c.name} {load:g}x seed {seed}", attempt)
    return Run(notes=[f"the stack failed three times: {run}"]) if isinstance(run, list) else run


def cell_runs(c: Case, load: float, unreachable: bool, args: argparse.Namespace, n: int) -> list[Run]:
    """``n`` seeded runs (seeds ``--seed``..); with ``--until-struck``, seeds go on until ``n`` runs
    were struck by the fault (at most ``3 n`` runs), so every cell has ``n`` runs to count."""
    runs: list[Run] = []
    limit = 3 * n if args.until_struck else n
    while len(runs) < limit and len([r for r in runs if r.struck is not None]) < n:
        seed = args.seed + len(runs)
        runs.append(tried_run(c, load, seed, unreachable, args))
        print(f"#   {c.name} {load:g}x seed {seed}: {progress(runs[-1])}", file=sys.stderr, flush=True)
    return runs


def cells(args: argparse.Namespace) -> list[tuple[Case, float]]:
    chosen = [c for c in cases() if args.only in ("", c.fault) and args.case in c.name]
    if args.updates:
        chosen = [c for c in chosen if c.fault != SEED_FAULT]
    if args.quick:
        return [(c, 1.0) for c in chosen if c.fault == SEED_FAULT]
    loads = tuple(float(x) for x in args.loads.split(",")) if args.loads else LOADS
    return [(c, load) for c in chosen for load in ((1.0,) if "(light)" in c.name else loads)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=None, help="seeded runs a cell (default 10; --engine vllm: 5 a load)"
    )
    parser.add_argument(
        "--engine",
        choices=("sglang", "vllm"),
        default="sglang",
        help="vllm: a real vLLM server on CPU instead of the emulated SGLang cluster (bench_page_vllm.py)",
    )
    parser.add_argument("--quick", action="store_true", help="2 runs a cell, the seed fault only")
    parser.add_argument("--only", default="", help="one fault class")
    parser.add_argument("--case", default="", help="only the cases whose name contains this (e.g. light)")
    parser.add_argument("--seed", type=int, default=1, help="first seed")
    parser.add_argument("--time-scale", type=float, default=4.0, help="simulated seconds per wall second")
    parser.add_argument("--limit", type=float, default=30.0, help="wall seconds watched after the fault")
    parser.add_argument(
        "--warm-steps",
        type=int,
        default=200,
        help="scheduler steps added before the fault (default 200: 10 sim s)",
    )
    parser.add_argument(
        "--until-struck",
        action="store_true",
        help="go on with further seeds until --runs runs a cell were struck (at most 3x --runs)",
    )
    parser.add_argument(
        "--unreachable-only", action="store_true", help="only the probe-unreachable variant (no cells)"
    )
    parser.add_argument("--no-unreachable", action="store_true", help="leave out the unreachable variant")
    parser.add_argument(
        "--loads", default="", help="comma-separated loads (default 0.5,1,2; --engine vllm: busy,light)"
    )
    parser.add_argument(
        "--updates", action="store_true", help="the leak and SWA cells only (the slot-id updates)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    if args.engine == "vllm":
        import bench_page_vllm  # benchmarks/ (this script's directory is on sys.path)

        done = bench_page_vllm.main(args)
        print(f"# done {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
        return done
    runs_a_cell = 2 if args.quick else args.runs or 10
    print(
        "| case | load | struck/runs | crashed in the watch | received page before crash "
        "| received text names pool, rank, slot ids | fault -> page, wall s median / max "
        "| paged after the crash: crash -> page, s median / max | page -> text with ids, s median / max |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    updates = []
    for c, load in [] if args.unreachable_only else cells(args):
        runs = cell_runs(c, load, False, args, runs_a_cell)
        print(row(c.name, load, runs), flush=True)
        if c.fault != SEED_FAULT:
            updates.append(update_row(c.name, FAULTS[c.fault].pool, load, runs))
            print(f"# update row (the table follows at the end): {updates[-1]}", file=sys.stderr, flush=True)
    if updates:
        print(
            "\n| case | load | paged/runs | slot ids in the first page | ids in an [UPDATE] "
            "| page -> ids received, wall s median / max | the pool's busy census interval "
            "| ids within one census interval of the page | PagerDuty incidents a run (max) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(updates), flush=True)
    if not args.no_unreachable and not args.updates and args.only in ("", SEED_FAULT):
        (busy,) = [c for c in cases() if c.name == f"{SEED_FAULT} (busy)"]
        runs = cell_runs(busy, 1.0, True, args, runs_a_cell)
        print(
            "\n| variant | load | struck/runs | crashed | paged with the exact cause "
            "| within 1 s of the crash | crash -> page, wall s median / max |"
        )
        print("|---|---|---|---|---|---|---|")
        print(unreachable_row(runs), flush=True)
    print(f"\nTime scale {args.time_scale:g}; watch {args.limit:g} wall s after the fault.")
    print(f"# done {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

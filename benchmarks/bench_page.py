"""The page as the on-call engineer receives it (issue 23): fault -> received notification, per
fault class and load, through the stack as deployed.

Each run starts, on 127.0.0.1 only, a fresh copy of what :mod:`rigs.stack.launch`
starts (and with its helpers): one sidecar per pod with the environment and arguments of the
rendered PD example (:mod:`rigs.stack.deployed`), real Prometheus with the rendered rules and
PodMonitor scrape, real Alertmanager with ``deploy/alertmanager/alertmanager.yaml`` and its
templates, every receiver (webhook, Slack, PagerDuty) pointed at a loopback recorder.  The
emulated cluster is ``detection_cases.cases()``'s deployment of the fault class (the fault strikes
at step 40; traffic at 0.5x, 1x, 2x its rate; ``--seed``-th run seeded ``seed + i``), run in a child
process (``page_cluster.py``) at ``--time-scale`` simulated seconds per wall second with the probe
on every rank; a unified worker gets the prefill pod's sidecar configuration (the PD example has no
unified pod).  What a run saw and the tables' rows are ``page_runs.py``'s.

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

Kept whole: one run through the deployed stack (:func:`one_run`) and the cells that repeat it
(seeds, retries, ``--until-struck``) share the run's arguments; the child process and what a run
saw are their own modules.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detection_cases import Case, cases  # benchmarks/ (this script's directory is on sys.path)
from page_cluster import STARTUP
from page_figures import retried
from page_runs import (
    ROW_HEAD,
    SEED_FAULT,
    UNREACHABLE_HEAD,
    UPDATE_HEAD,
    Run,
    finished,
    observe,
    progress,
    row,
    unreachable_row,
    update_row,
)

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
from rigs.stack.receivers import WebhookRecorder

LOADS = (0.5, 1.0, 2.0)
CLUSTER = Path(__file__).resolve().parent / "page_cluster.py"


def pod_names(c: Case) -> list[str]:
    cfg = c.config
    return [
        f"{role}-{i}"
        for role, n in (("prefill", cfg.prefill), ("unified", cfg.unified), ("decode", cfg.decode))
        for i in range(n)
    ]


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
        emulator = Process("emulator", [sys.executable, str(CLUSTER), json.dumps(spec)], log)
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
    args = parser.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    if args.engine == "vllm":
        import bench_page_vllm  # benchmarks/ (this script's directory is on sys.path)

        done = bench_page_vllm.main(args)
        print(f"# done {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
        return done
    runs_a_cell = 2 if args.quick else args.runs or 10
    print(ROW_HEAD)
    updates = []
    for c, load in [] if args.unreachable_only else cells(args):
        runs = cell_runs(c, load, False, args, runs_a_cell)
        print(row(c.name, load, runs), flush=True)
        if c.fault != SEED_FAULT:
            updates.append(update_row(c.name, FAULTS[c.fault].pool, load, runs))
            print(f"# update row (the table follows at the end): {updates[-1]}", file=sys.stderr, flush=True)
    if updates:
        print(f"\n{UPDATE_HEAD}")
        print("\n".join(updates), flush=True)
    if not args.no_unreachable and not args.updates and args.only in ("", SEED_FAULT):
        (busy,) = [c for c in cases() if c.name == f"{SEED_FAULT} (busy)"]
        runs = cell_runs(busy, 1.0, True, args, runs_a_cell)
        print(f"\n{UNREACHABLE_HEAD}")
        print(unreachable_row(runs), flush=True)
    print(f"\nTime scale {args.time_scale:g}; watch {args.limit:g} wall s after the fault.")
    print(f"# done {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

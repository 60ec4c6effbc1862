"""Detection latency per fault class: from the fault to poolwatch's page, next to the moment SGLang's
own idle check crashes the server (the emulated crash) and to the Prometheus-rule path.

Two measurements per scenario (every fault of ``poolwatch_emulator.faults.FAULTS``; the seed fault
under busy and under light traffic):

* **simulated** (deterministic): the emulator stepped in process under the real probe; the sidecar's
  store and detector read each live rank's latest snapshot once per simulated second (its 1 Hz
  scrape, as if SGLang ran in real time) and evaluate every 5 s; a crashed worker's probes are gone.
  The Prometheus-rule path is computed: sidecar detection + scrape interval (15 s, the PodMonitor's)
  + the rule's ``for:`` (read from deploy/prometheus/poolwatch-rules.yml) + evaluation interval (30 s).
* **wall**: the same scenario in real time at ``--time-scale``, probes served on loopback, the real
  sidecar app (scrape loop, detector, webhook notifier) in process; the page is timed when it reaches
  a webhook receiver, in wall seconds and in the emulator's simulated seconds.

Run: ``python benchmarks/bench_detection.py [--time-scale 2] [--no-wall]``.  Figures, never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from detection_cases import SIGN, Case, cases  # benchmarks/ (this script's directory is on sys.path)
from webhook import Webhook

from poolwatch.detect.alert import AlertState
from poolwatch.detect.detector import Detector
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import attach, detach, probe_of
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.sidecar import Settings
from poolwatch.sidecar.app import create_app
from poolwatch.sidecar.store import SnapshotStore
from poolwatch_emulator import Cluster
from poolwatch_emulator.faults import FAULTS

RULES = Path(__file__).parent.parent / "deploy" / "prometheus" / "poolwatch-rules.yml"
PROM_SCRAPE, PROM_EVAL = 15.0, 30.0
HORIZON = 300.0  # simulated seconds after the fault we wait for the crash


def rule_for_seconds(alert: str) -> float:
    """The longest ``for:`` of the generated rules named ``alert``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    durations = [r.get("for", "0s") for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert]
    return max(sum(float(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", d)) for d in durations)


@dataclass
class Timeline:
    """When things happened, in simulated seconds (and wall seconds in the wall run)."""

    worker: str = ""
    struck: float | None = None
    paged: float | None = None
    crashed: float | None = None


def conservation_page(alerts: list[dict[str, str]], fault: str, worker: str) -> bool:
    info = FAULTS[fault]
    return any(
        a["alertname"] == SIGN[info.sign] and a["pool"] == info.pool and a["worker"] == worker for a in alerts
    )


def note_events(cluster: Cluster, fault: str, t: Timeline, now: float) -> None:
    for worker in cluster.workers:
        if t.struck is None and any(r.faults.fired[fault] for r in worker.ranks):
            t.struck, t.worker = now, worker.name
        if worker.crashed and worker.name == t.worker and t.crashed is None:
            t.crashed = now


def simulate(c: Case, directory: Path) -> Timeline:
    cluster = Cluster(c.config)
    for worker in cluster.workers:
        conf = ProbeConfig(
            directory=str(directory), serve=False, worker=worker.name, release=cluster.release.name
        )
        for rank in worker.ranks:
            probe = attach(SGLANG, rank, replace(conf, release=cluster.release.name), serve=False)
            probe.clock, probe.wall = (lambda: cluster.clock.now), cluster.clock.unix
    store = SnapshotStore(history=4)
    detector = Detector(Settings().mixin(), cluster.clock.unix)
    store.subscribe(detector.observe)
    t, next_scrape, next_eval = Timeline(), 1.0, 5.0
    while t.struck is None or (t.crashed is None and cluster.clock.now < t.struck + HORIZON):
        cluster.step()
        now = cluster.clock.now
        note_events(cluster, c.fault, t, now)
        if now >= next_scrape:
            next_scrape += 1.0
            for rank in (r for w in cluster.workers if not w.crashed for r in w.ranks):
                live = probe_of(rank)
                if live is not None and live.latest is not None:
                    store.put(live.latest)
        if now >= next_eval:
            next_eval += 5.0
            detector.evaluate(latest=store.latest(), targets=store.targets())
        firing = [a.all_labels for a in detector.alerts() if a.state is AlertState.FIRING]
        if t.paged is None and t.struck is not None and conservation_page(firing, c.fault, t.worker):
            t.paged = now
    cluster.stop()
    return t


async def in_real_time(
    c: Case, directory: Path, scale: float, limit: float = 30.0
) -> tuple[Timeline, Timeline]:
    """Wall seconds from the fault to the webhook and to the crash (simulated seconds in ``sim``).
    A crashed worker's probes are detached (the process is gone); a page can only come before."""
    cluster, hook = Cluster(c.config), Webhook()
    for worker in cluster.workers:
        conf = ProbeConfig(directory=str(directory), worker=worker.name, release=cluster.release.name)
        for rank in worker.ranks:
            attach(SGLANG, rank, conf, serve=True)
    env = {"POOLWATCH_PROBE_DIR": str(directory), "POOLWATCH_WEBHOOK_URLS": hook.url, "POOLWATCH_WORKER": "x"}
    app = create_app(Settings.from_env(env))
    wall, sim = Timeline(), Timeline()
    async with app.router.lifespan_context(app):
        cluster.start(scale)
        started = time.monotonic()
        while time.monotonic() - started < limit and (wall.crashed is None or time.time() < wall.crashed + 2):
            with cluster.lock:
                note_events(cluster, c.fault, wall, time.time())
                note_events(cluster, c.fault, sim, cluster.clock.now)
                for rank in (r for w in cluster.crashed for r in w.ranks):
                    detach(rank)
            if wall.paged is None and conservation_page([a for _, a in hook.firing], c.fault, wall.worker):
                wall.paged, sim.paged = hook.firing[-1][0], cluster.clock.now
            await asyncio.sleep(0.02)
        cluster.stop()
    for rank in cluster.schedulers:
        detach(rank)
    hook.server.shutdown()
    return _relative(wall), _relative(sim)


def _relative(t: Timeline) -> Timeline:
    if t.struck is None:
        return t
    shift = t.struck
    return Timeline(t.worker, 0.0, *(None if x is None else x - shift for x in (t.paged, t.crashed)))


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--no-wall", action="store_true")
    args = parser.parse_args(argv)
    print(
        "| scenario | alert | page after fault, sim s | crash after fault, sim s | page / crash "
        "| Prometheus rule path, sim s | rule / crash | wall run: page, wall s (sim s) "
        "| wall run: crash, wall s (sim s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(cases()):
            t = simulate(c, Path(tmp) / f"sim{i}")
            t = _relative(t)
            alert = SIGN[FAULTS[c.fault].sign]
            rule = None if t.paged is None else t.paged + PROM_SCRAPE + rule_for_seconds(alert) + PROM_EVAL
            walls = "— | —"
            if not args.no_wall:
                w, s = asyncio.run(in_real_time(c, Path(tmp) / f"wall{i}", args.time_scale))
                walls = f"{fmt(w.paged)} ({fmt(s.paged)}) | {fmt(w.crashed)} ({fmt(s.crashed)})"
            crash = fmt(t.crashed) if t.crashed is not None else f"> {HORIZON:g}"
            print(
                f"| {c.name} | {alert} | {fmt(t.paged)} | {crash} | {ratio(t.paged, t.crashed)} "
                f"| {fmt(rule)} | {ratio(rule, t.crashed)} | {walls} |",
                flush=True,
            )
    print(
        f"\nRule path = sidecar page + Prometheus scrape ({PROM_SCRAPE:g} s) + the rule's for: "
        f"+ evaluation interval ({PROM_EVAL:g} s).  Wall run at time scale {args.time_scale:g}."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

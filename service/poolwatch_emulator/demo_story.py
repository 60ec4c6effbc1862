"""The narrated scenario behind ``poolwatch demo``: an emulated cluster, a fault, and what happens.

The emulator runs on its own thread at a time scale; :meth:`Story.tick` (called by the demo's
event loop a few times a second) prints each new event once: healthy heartbeats, the fault, every
alert the sidecar fires, and the moment SGLang's idle check crashes a worker, with how much earlier
poolwatch paged; at the end, where to look next (:mod:`poolwatch_emulator.demo_next`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from poolwatch.detect.alert import AlertState
from poolwatch_emulator.demo_next import where_next

if TYPE_CHECKING:
    from poolwatch.sidecar.alerting import AlertWiring
    from poolwatch_emulator.build import ModelShape
    from poolwatch_emulator.cluster import Cluster
    from poolwatch_emulator.faces import WorkerServer
    from poolwatch_emulator.faults import FaultSpec

__all__ = ["Story"]

HEARTBEAT_S = 20.0  # simulated seconds between "still healthy" lines
SETTLE_S = 2.0  # wall seconds after the first alert before the hint (alerts that fire together first)


def _second_pool(shape: ModelShape) -> str:
    if shape.host_kv_tokens is not None:
        return f"HiCache host {shape.host_kv_tokens} tokens"
    if shape.swa_kv_tokens is not None:
        return f"SWA {shape.swa_kv_tokens} tokens"
    if shape.mamba_slots is not None:
        return f"Mamba {shape.mamba_slots} slots"
    return f"page size {shape.page_size}"


@dataclass
class Story:
    cluster: Cluster
    servers: list[WorkerServer]
    probe_dir: Path
    log_dir: Path
    work: Path
    fault: FaultSpec
    time_scale: float
    out: TextIO
    guard: bool = False
    alerting: AlertWiring | None = None
    first_alert: float | None = None  # unix time the sidecar fired its first alert
    url: str = ""  # the sidecar's
    incidents_file: Path | None = None  # where the sidecar keeps its incidents (kept after the demo)
    fired: dict[str, str] = field(default_factory=dict)  # alert name -> its runbook_url
    _said: set[str] = field(default_factory=set)
    _next_heartbeat: float = HEARTBEAT_S / 4

    @classmethod
    def build(cls, args: argparse.Namespace, work: Path, out: TextIO) -> Story:
        """Build the cluster with the fault scheduled, its HTTP faces and its probes."""
        from poolwatch_emulator.cluster import Cluster
        from poolwatch_emulator.demo_cluster import demo_config
        from poolwatch_emulator.faces import WorkerServer, attach_probes
        from poolwatch_emulator.faults import parse_fault

        if args.time_scale <= 0 or args.healthy < 0:
            raise ValueError("--time-scale must be > 0 and --healthy >= 0")
        fault = parse_fault(f"{args.fault}@{args.healthy:g}s")
        log_dir, probe_dir = work / "logs", work / "probes"
        log_dir.mkdir(parents=True, exist_ok=True)
        config = demo_config(args, fault, log_dir)
        cluster = Cluster(config)
        servers = [WorkerServer(w).start() for w in cluster.workers]
        guard = bool(getattr(args, "guard", False))
        attach_probes(cluster, probe_dir, guard=guard)
        return cls(cluster, servers, probe_dir, log_dir, work, fault, args.time_scale, out, guard)

    def say(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            print(f"[t={self.cluster.clock.now:6.0f}s] {text}", file=self.out, flush=True)

    def begin(self, url: str, alerting: AlertWiring) -> None:
        from poolwatch_emulator.demo_cluster import narrated
        from poolwatch_emulator.faults import FAULTS

        self.alerting, self.url = alerting, url
        c = self.cluster
        shape = c.config.shape
        faces = ", ".join(f"{w.name} {s.url}/metrics" for w, s in zip(c.workers, self.servers, strict=True))
        lines = [
            f"poolwatch demo — an emulated SGLang {c.release.name} {'PD ' if c.config.prefill else ''}"
            "cluster with the sidecar watching it",
            f"  status page  {url}/",
            f"  metrics      {url}/metrics",
            f"  alerts       {url}/api/v1/alerts",
            f"  workers      {faces}",
            f"  kept in      {self.work} (logs, probes, the sidecar's alerts and incidents)",
            f"  pools/rank   full KV {shape.full_kv_tokens} tokens, {_second_pool(shape)}; "
            f"TP {c.config.tp}; time runs {self.time_scale:g}x",
            f"  scenario     healthy traffic, then `{self.fault}`"
            + (" (the seed incident)" if self.fault.name == "pd-chunked-mamba-double-free" else "")
            + "; Ctrl-C to stop",
            "  guard        "
            + (
                "on (POOLWATCH_PROBE_GUARD=1): the probe refuses a free of a slot still owned, "
                "and repairs a free list on exact proof"
                if self.guard
                else "off: SGLang checks no HiCache host conservation, the worker keeps serving"
                if shape.host_kv_tokens is not None and "host" in self.fault.name
                else "off: the books stay balanced, SGLang's idle check sees nothing (the ground truth "
                "is told below)"
                if narrated(FAULTS[self.fault.name])
                else "off: SGLang's own idle check will crash the worker (try --guard)"
            ),
            "",
        ]
        print("\n".join(lines), file=self.out, flush=True)
        c.start(self.time_scale)

    def tick(self) -> None:
        self._heartbeat()
        self._fault()
        self._truth()
        self._repairs()
        self._alerts()  # before crashes: an alert and a crash seen in one tick are told in order
        self._crashes()
        self._hint()

    def _heartbeat(self) -> None:
        now = self.cluster.clock.now
        if now < self._next_heartbeat or (self.first_alert is not None and not self.guard):
            return
        self._next_heartbeat = now + HEARTBEAT_S
        done = sum(r.emu_finished_total for r in self.cluster.schedulers)
        ranks = len(self.cluster.schedulers)
        state = "still serving after the repair" if self.first_alert is not None else "healthy"
        self.say(f"beat{int(now)}", f"{state}: {ranks} ranks, every pool balanced, {done} requests finished")

    def _fault(self) -> None:
        from poolwatch_emulator.faults import FAULTS

        if self.cluster.clock.now >= (self.fault.at_s or 0.0):
            info = FAULTS[self.fault.name]
            self.say("fault", f"fault armed: {info.name} ({info.reference}): {info.summary}")

    def _truth(self) -> None:
        """For a fault the pool gap cannot tell, what the emulator knows (once a heartbeat)."""
        from poolwatch_emulator.demo_cluster import blind_line, narrated
        from poolwatch_emulator.faults import FAULTS

        info = FAULTS[self.fault.name]
        now = self.cluster.clock.now
        if not narrated(info) or now < (self.fault.at_s or 0.0):
            return
        line = blind_line(self.cluster, info)
        if line is not None:
            self.say(f"truth{int(now // HEARTBEAT_S)}", f"ground truth: {line}")

    def _alerts(self) -> None:
        if self.alerting is None:
            return
        for alert in self.alerting.detector.alerts():
            if alert.state is not AlertState.FIRING:
                continue
            labels = dict(alert.labels)
            where = (
                f"{labels.get('worker', '')} dp{labels.get('dp_rank', '?')}-tp{labels.get('tp_rank', '?')}"
            )
            if self.first_alert is None:
                self.first_alert = alert.fired_at or time.time()
            self.fired.setdefault(alert.name, alert.annotations.get("runbook_url", ""))
            text = f"ALERT {alert.name} ({alert.severity}) {where} {labels.get('pool', '')}: "
            self.say(f"alert:{alert.fingerprint}", text + alert.annotations.get("description", ""))

    def _crashes(self) -> None:
        for worker in self.cluster.crashed:
            key = f"crash:{worker.name}"
            if key in self._said:
                continue
            message = "\n    ".join(worker.crash_message.strip().splitlines())  # the Mamba figures too
            self.say(key, f"SGLang's idle check crashed {worker.name}:\n    {message}")
            if self.first_alert is not None:
                wall = time.time() - self.first_alert
                sim = wall * self.time_scale
                self.say(
                    key + ":lead",
                    f"poolwatch paged {sim:.1f} simulated s ({wall:.2f} s wall) before the crash",
                )
            else:
                self.say(key + ":lead", "poolwatch had not paged before the crash")

    def _hint(self) -> None:
        if self.first_alert is not None and time.time() - self.first_alert >= SETTLE_S:
            self.say(
                "hint",
                f"the status page {self.url}/ shows it now; Ctrl-C ends the demo and says where to look next",
            )

    def _repairs(self) -> None:
        from poolwatch.probe.lifecycle import probe_of

        for worker in self.cluster.workers:
            for rank in worker.ranks:
                probe = probe_of(rank)
                snap = probe.latest if probe is not None else None
                for r in snap.repairs if snap is not None else ():
                    where = f"{worker.name} dp{rank.dp_rank}-tp{rank.tp_rank}"
                    refused = r.kind.value == "refuse"  # guard v2: the wrong free never ran
                    what = "refused to free" if refused else f"{r.kind.value} of"
                    self.say(
                        f"repair:{where}:{r.kind}:{r.pool}:{r.count}",
                        f"GUARD {where}: {what} {r.pool.value} slot(s) {list(r.slots)} "
                        f"{'in' if refused else 'after'} {r.hook} (iteration {r.seq}, request "
                        f"{', '.join(r.requests) or '-'}); {r.count} so far -- the worker keeps serving",
                    )

    def finish(self) -> None:
        lead = "no alert" if self.first_alert is None else "alerts fired"
        crashed = ", ".join(w.name for w in self.cluster.crashed) or "none"
        done = sum(r.emu_finished_total for r in self.cluster.schedulers)
        alive = f"; {done} requests finished" if not self.cluster.crashed else ""
        print(f"demo over: {lead}; crashed workers: {crashed}{alive}", file=self.out, flush=True)
        print(where_next(self.url, self.fired, Path.cwd(), self.incidents_file), file=self.out, flush=True)

    def close(self) -> None:
        self.cluster.stop()
        for server in self.servers:
            server.stop()

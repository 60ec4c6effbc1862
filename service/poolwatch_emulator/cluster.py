"""An emulated SGLang deployment: prefill, decode and unified workers of TP x DP ranks, fed by a
seeded workload, stepped deterministically (``run_steps``, ``run_for``) or in real time with a
time scale on a background thread (the demo).

One step advances the simulated clock by ``dt`` and runs one event-loop iteration on every rank
(prefill workers first, then unified, then decode), so every rank is at a loop boundary between
steps.  With ``skip_idle`` the clock jumps over traffic gaps once nothing is in flight.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

from poolwatch_emulator.build import DisaggregationMode
from poolwatch_emulator.clock import SimClock
from poolwatch_emulator.cluster_config import ClusterConfig
from poolwatch_emulator.req import RequestSpec
from poolwatch_emulator.scheduler import Abort, Scheduler
from poolwatch_emulator.transfer import Transfer
from poolwatch_emulator.versions import parse_release
from poolwatch_emulator.worker import Worker
from poolwatch_emulator.workload import Workload

__all__ = ["Cluster"]


class Cluster:
    def __init__(self, config: ClusterConfig):
        config.check()
        self.config = config
        self.release = parse_release(config.version)
        self.clock = SimClock(config.epoch)
        self.lock = threading.RLock()
        self.steps = 0
        self.accepting = True  # drain() stops new arrivals
        budget = min(config.shape.context_len, config.shape.full_kv_tokens // 8)  # one request's tokens
        max_prompt = budget * 3 // 4
        self.workload = Workload(
            config.workload,
            seed=config.seed,
            max_prompt=max_prompt,
            max_output=max(2, budget - max_prompt - 1),
        )
        self.workers: list[Worker] = []
        for role, count in (
            ("prefill", config.prefill),
            ("unified", config.unified),
            ("decode", config.decode),
        ):
            mode = DisaggregationMode.NULL if role == "unified" else DisaggregationMode(role)
            self.workers += [
                Worker(f"{role}-{i}", mode, config, self.clock, self.release) for i in range(count)
            ]
        self._rr = {"prefill": 0, "decode": 0, "unified": 0}
        self._aborts: list[tuple[float, str, tuple[tuple[Worker, int], ...]]] = []
        self._live: dict[str, tuple[Transfer, Worker, Worker]] = {}
        self._horizon = float("inf")  # run_for never skips past its end
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def schedulers(self) -> list[Scheduler]:
        """Every rank of every worker."""
        return [rank for w in self.workers for rank in w.ranks]

    def by_role(self, role: str) -> list[Worker]:
        return [w for w in self.workers if w.role == role]

    @property
    def crashed(self) -> list[Worker]:
        return [w for w in self.workers if w.crashed]

    def _pick(self, role: str) -> tuple[Worker, int]:
        workers = self.by_role(role)
        n = self._rr[role]
        self._rr[role] += 1
        return workers[n % len(workers)], (n // len(workers)) % self.config.dp

    def _route(self, spec: RequestSpec) -> None:
        if self.config.unified:
            targets: tuple[tuple[Worker, int], ...] = (self._pick("unified"),)
            transfer = None
        else:
            targets = (self._pick("prefill"), self._pick("decode"))
            transfer = Transfer(spec.rid, spec.transfer_latency)
            self._live[spec.rid] = (transfer, targets[0][0], targets[1][0])
        for worker, dp in targets:
            worker.deliver(dp, spec, transfer)
        if spec.abort_at is not None:
            heapq.heappush(self._aborts, (spec.abort_at, spec.rid, targets))

    def step(self) -> None:
        """Advance the clock by ``dt`` and run one loop iteration on every live rank."""
        with self.lock:
            self._maybe_skip_idle()
            self.clock.advance(self.config.dt)
            self.steps += 1
            for spec in self.workload.arrivals_until(self.clock.now) if self.accepting else ():
                self._route(spec)
            while self._aborts and self._aborts[0][0] <= self.clock.now:
                _, rid, targets = heapq.heappop(self._aborts)
                for worker, dp in targets:
                    worker.deliver(dp, Abort(rid), None)
            for worker in self.workers:
                if worker.step():
                    self._fail_transfers(worker)
            if self.steps % 256 == 0:
                self._purge()

    def _fail_transfers(self, worker: Worker) -> None:
        for transfer, p, d in self._live.values():
            if worker in (p, d):
                transfer.failed = True

    def _purge(self) -> None:
        now = self.clock.now
        self._live = {k: v for k, v in self._live.items() if not (v[0].failed or v[0].done(now))}

    def _maybe_skip_idle(self) -> None:
        nxt = self.workload.next_arrival if self.accepting else self.clock.now + 60.0
        if not self.config.skip_idle or nxt - self.clock.now < 10 * self.config.dt or self._aborts:
            return
        target = min(nxt, self._horizon) - self.config.dt
        if target > self.clock.now and all(w.crashed or w.quiescent() for w in self.workers):
            self.clock.advance(target - self.clock.now)

    def drain(self, *, abort_queued: bool = False) -> None:
        """Stop admitting new requests (pending aborts still arrive): the cluster goes idle.
        With ``abort_queued`` the router also cancels every request not yet running."""
        with self.lock:
            self.accepting = False
            if abort_queued:
                for worker in self.workers:
                    for dp in range(self.config.dp):
                        for rid in worker.queued_rids(dp):
                            worker.deliver(dp, Abort(rid), None)

    def run_until(self, predicate: Callable[[], bool], max_steps: int) -> bool:
        """Step until ``predicate()`` holds (True) or ``max_steps`` have run (False)."""
        for _ in range(max_steps):
            if predicate():
                return True
            self.step()
        return predicate()

    def run_steps(self, n: int) -> None:
        for _ in range(n):
            self.step()

    def run_for(self, seconds: float) -> None:
        """Step until ``seconds`` more simulated seconds have passed."""
        end = self.clock.now + seconds
        self._horizon = end
        try:
            while self.clock.now + 1e-9 < end:
                self.step()
        finally:
            self._horizon = float("inf")

    def start(self, time_scale: float = 60.0) -> None:
        """Run on a daemon thread, ``time_scale`` simulated seconds per wall second."""
        if self._thread is not None:
            raise RuntimeError("the cluster is already running")
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run_realtime, args=(time_scale,), daemon=True, name="emulator"
        )
        self._thread.start()

    def _run_realtime(self, time_scale: float) -> None:
        wall0, sim0 = time.monotonic(), self.clock.now
        while not self._stop.is_set() and len(self.crashed) < len(self.workers):
            self.step()
            ahead = (self.clock.now - sim0) / time_scale - (time.monotonic() - wall0)
            if ahead > 0:
                self._stop.wait(ahead)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for worker in self.workers:
            worker.close()

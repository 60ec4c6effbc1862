"""Long clean runs of one real vLLM release, judged by every detector as the sidecar deploys it:
not one finding of the probe and not one alert of any family (issue 39: no false alarm on the clean
long runs of every supported release).

Run inside the release's venv (:meth:`rigs.venv.Venv.run`)::

    python -m tests.vllm_real.check_clean

Each workload steps vLLM's own ``Scheduler`` (:class:`rigs.vllm.engine.Engine`) for
:data:`STEPS` engine steps of :data:`SECONDS_PER_STEP` each -- 1,000 s of engine time, beyond the
stranded-hold bound (600 s) and every rule's wait -- with shared prefixes, chunked prefills, a
steady stream of arrivals and an abort every 23 steps, then drains it and takes a final look with a
census.  The probe samples at every hook with every census due, once with guard off and once on
(``_guarded``: a refused healthy free is a finding); every snapshot goes to a
:class:`~rigs.timeline.Timeline`, whose :class:`~poolwatch.detect.detector.Detector` carries the
shipped thresholds.  The workloads: the plain pool, a pool small enough to preempt, full + Mamba
(align mode), async scheduling (two steps in flight), async speculative decoding (two n-gram
drafts a step, the scheduler's own placeholders, every draft rejected),
and both sides of P/D with vLLM's own NIXL connector -- a decode worker whose prompts' KV lands
from a remote prefill a few steps after it asks, and a prefill worker that keeps a finished
request's blocks until the transfer reports it sent.  A release that lacks a workload's feature
says so (the check passes with ``skipped`` and the reason; the test asks that the core ones ran).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rigs.checks import report, run_all
from rigs.timeline import Timeline
from tests.vllm_real.faults import prompt

STEPS = 2000
SECONDS_PER_STEP = 0.5  # an engine step's wall time: 2,000 steps are 1,000 s of the detector's clock
TRANSFER_STEPS = 3  # a P/D transfer reports done this many steps after it could start
_CONSUMER = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
_PRODUCER = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}


@dataclass(frozen=True)
class Workload:
    """One clean run's engine and its traffic."""

    name: str
    engine: dict[str, Any] = field(default_factory=dict)  # rigs.vllm.engine.Engine's arguments
    side: str = ""  # P/D: "decode" (the prompts' KV comes from a remote prefill) or "prefill"


WORKLOADS = (
    Workload("clean_prefix_aborts", {"blocks": 400}),
    Workload("clean_preempting", {"blocks": 40}),
    Workload("clean_hybrid", {"blocks": 400, "hybrid": True}),
    Workload("clean_async", {"blocks": 200, "batch_queue": 2}),
    Workload("clean_spec_decode", {"blocks": 200, "batch_queue": 2, "drafts": 2}),
    Workload("clean_pd_decode", {"blocks": 200, "connector": _CONSUMER}, "decode"),
    Workload("clean_pd_prefill", {"blocks": 200, "connector": _PRODUCER}, "prefill"),
)  # fmt: skip


@dataclass
class Traffic:
    """The run's arrivals and the P/D transfers it reports done."""

    side: str
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    arrived: int = 0
    aborted: int = 0
    transfers: int = 0
    due: dict[str, int] = field(default_factory=dict)  # a transfer's request -> the step it reports

    def feed(self, e: Any, n: int) -> None:
        for _ in range(n):
            rid, ids = f"r{self.arrived}", prompt(self.rng)
            self.arrived += 1
            e.add(rid, ids, self.rng.randrange(4, 40), transfer=self._transfer(rid, len(ids)))

    def _transfer(self, rid: str, tokens: int) -> dict[str, Any] | None:
        if self.side == "decode":
            from rigs.bugs.vllm.shared import remote_prefill

            return remote_prefill(rid, -(-tokens // 16))
        if self.side == "prefill":
            return {"do_remote_decode": True, "do_remote_prefill": False}
        return None

    def landed(self, e: Any) -> set[str]:
        """The transfers done by this step: a decode request's KV some steps after it began to
        wait for it; a prefill request's send some steps after it finished (its blocks kept)."""
        for rid, req in e.sched.requests.items():
            started = (
                req.status.name == "WAITING_FOR_REMOTE_KVS" if self.side == "decode" else req.is_finished()
            )
            if started and rid not in self.due:
                self.due[rid] = e.steps + TRANSFER_STEPS
        done = {rid for rid, at in self.due.items() if at <= e.steps and rid in e.sched.requests}
        for rid in done:
            self.due[rid] = sys.maxsize  # reported once
        self.transfers += len(done)
        return done


def drive(work: Workload, guard: bool) -> tuple[Timeline, dict[str, Any]]:
    """``work`` for :data:`STEPS` steps (``guard``: guard on), drained, and a final look with a
    census."""
    from rigs.bugs.vllm.shared import started

    e, timeline = started(seconds_per_step=SECONDS_PER_STEP, guard=guard, **work.engine)
    traffic, preempted = Traffic(work.side), set[str]()
    traffic.feed(e, 24)
    for i in range(STEPS):
        if i % 7 == 0:
            traffic.feed(e, 3)
        if i % 23 == 0 and e.sched.running:
            e.abort([e.sched.running[-1].request_id])
            traffic.aborted += 1
        _step(e, work, traffic)
        preempted.update(r.request_id for r in e.sched.waiting if r.status.name == "PREEMPTED")
    for _ in range(20 * STEPS):
        if not e.sched.requests:
            break
        _step(e, work, traffic)
    e.settle()
    probe = _probe(e)
    timeline.look(e.steps + 1, probe.sample_now("final", census=True))
    return timeline, {
        "steps": e.steps,
        "arrived": traffic.arrived,
        "aborted": traffic.aborted,
        "preempted": len(preempted),
        "transfers": traffic.transfers,
        "left": len(e.sched.requests),
    }


def _step(e: Any, work: Workload, traffic: Traffic) -> None:
    landed = traffic.landed(e) if work.side else set()
    if work.side == "decode":
        e.step(received=landed)
    else:
        e.step(sent=landed)


def _probe(e: Any) -> Any:
    from poolwatch.probe.lifecycle import probe_of

    probe = probe_of(e.sched)
    assert probe is not None, "the scheduler has no probe"
    return probe


def check(work: Workload, guard: bool) -> None:
    """One workload: no finding (with guard on: no refusal either), no alert of any family, the
    run drained."""
    timeline, ran = drive(work, guard)
    row = timeline.row()
    quiet = row["finding"] is None and row["alerts"] == {} and timeline.engine is None
    report(
        name(work, guard),
        quiet and ran["left"] == 0 and timeline.snapshots > STEPS,
        {**ran, "snapshots": timeline.snapshots, "finding": row["finding"], "alerts": row["alerts"]},
    )


def name(work: Workload, guard: bool) -> str:
    """The check's name: the workload's, ``_guarded`` with guard on."""
    return work.name + ("_guarded" if guard else "")


def buildable(work: Workload, guard: bool) -> Callable[[], None]:
    """``check(work, guard)``, with a release that cannot build the workload's engine said plainly."""

    def run() -> None:
        try:
            _buildable(work)
        except Exception as exc:  # the release's own error, said as it is
            report(name(work, guard), True, {"skipped": f"{type(exc).__name__}: {exc}"[:300]})
            return
        check(work, guard)

    return run


def _buildable(work: Workload) -> None:
    from rigs.vllm.engine import Engine

    Engine(**work.engine)


def main() -> int:
    runs = [(name(w, guard), buildable(w, guard)) for guard in (False, True) for w in WORKLOADS]
    return run_all(runs, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

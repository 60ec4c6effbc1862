"""What the sidecar's detector pages for each engine: one scenario per kind of finding, run through
a real :class:`~poolwatch.detect.detector.Detector` (fake clock), giving each firing alert's name,
severity and description.  ``test_engine_pages.py`` holds the texts against golden copies: SGLang's
as they were before alerting became engine-true (unchanged), vLLM's as they are now."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tests.detect.streams import RankStream, exact

from poolwatch.detect.alert import AlertState
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.model.findings import Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import IncidentKind, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot
from rigs.fakes.clock import FakeClock

__all__ = ["SCENARIOS", "Page", "pages"]

Page = tuple[str, str, str]  # alert name, severity, description
Scenario = Callable[[RankStream, FakeClock], list[Snapshot]]

SGLANG = WorkerId(
    "prefill-0", Role.PREFILL, dp_rank=0, tp_rank=1, pp_rank=0, model="qwen3-next", engine="sglang"
)
VLLM = WorkerId("vllm-0", Role.UNIFIED, model="llama", release="0.32.0", engine="vllm")


def _gap(pool: Pool, gap: int, phase: Phase = Phase.IDLE) -> Scenario:
    def run(s: RankStream, c: FakeClock) -> list[Snapshot]:
        return [s.next(exact(pool, gap), phase=phase) for _ in range(3)]

    return run


def _tripwire(
    kind: TripwireKind, pool: Pool, ids: tuple[int, ...], requests: tuple[str, ...] = ()
) -> Scenario:
    wire = Tripwire(kind, pool, ids, "free_blocks", 41, requests)

    def run(s: RankStream, c: FakeClock) -> list[Snapshot]:
        return [s.next(exact(pool, 0), tripwires=(wire,))]

    return run


def _large_leak(s: RankStream, c: FakeClock) -> list[Snapshot]:
    return [s.next(exact(Pool.FULL, 600), phase=Phase.IDLE) for _ in range(3)]


def _negative_used(s: RankStream, c: FakeClock) -> list[Snapshot]:
    account = PoolAccount(Pool.MAMBA, 476, 470, 8)  # used = 476 - 470 - 8 = -2
    return [s.next(account)]


def _logged_leak(s: RankStream, c: FakeClock) -> list[Snapshot]:
    line = "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=9, total=10"
    return [s.next(incidents=(Incident(IncidentKind.LEAK_DETECTED, line, c.now + 1),))]


def _repaired(kind: RepairKind) -> Scenario:
    def run(s: RankStream, c: FakeClock) -> list[Snapshot]:
        repair = Repair(kind, Pool.FULL, 2, (5, 6), "free_blocks", 3, ("r1",))
        s.probe = ProbeHealth(guard=True)
        return [replace(s.next(exact(Pool.FULL, 0)), repairs=(repair,))]

    return run


# name -> (worker, idle_check_strict as the source reports it, scenario)
SCENARIOS: dict[str, tuple[WorkerId, bool | None, Scenario]] = {
    "sglang-double-free-default": (SGLANG, None, _gap(Pool.MAMBA, -1, Phase.BUSY)),
    "sglang-double-free-relaxed": (SGLANG, False, _gap(Pool.MAMBA, -1, Phase.BUSY)),
    "sglang-negative-used": (SGLANG, True, _negative_used),
    "sglang-free-and-live": (
        SGLANG,
        True,
        _tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (452,), ("r-7",)),
    ),
    "sglang-leak-strict": (SGLANG, True, _gap(Pool.MAMBA, 2)),
    "sglang-leak-default": (SGLANG, None, _gap(Pool.MAMBA, 2)),
    "sglang-leak-relaxed": (SGLANG, False, _gap(Pool.MAMBA, 2)),
    "sglang-leak-large-relaxed": (SGLANG, False, _large_leak),
    "sglang-missing": (SGLANG, True, _tripwire(TripwireKind.MISSING, Pool.FULL, (7, 8, 9))),
    "sglang-host-surplus": (SGLANG, True, _gap(Pool.HOST, -3, Phase.BUSY)),
    "sglang-idle-check-strict": (SGLANG, None, _logged_leak),
    "sglang-idle-check-relaxed": (SGLANG, False, _logged_leak),
    "sglang-guard-refused": (SGLANG, True, _repaired(RepairKind.REFUSE)),
    "vllm-double-free": (VLLM, None, _gap(Pool.FULL, -1, Phase.BUSY)),
    "vllm-negative-ref": (VLLM, None, _tripwire(TripwireKind.NEGATIVE_REF, Pool.FULL, (17,), ("cmpl-9",))),
    "vllm-ref-below-owners": (
        VLLM,
        None,
        _tripwire(TripwireKind.REF_BELOW_OWNERS, Pool.FULL, (17, 18), ("cmpl-9", "cmpl-12")),
    ),
    "vllm-leak": (VLLM, None, _gap(Pool.FULL, 2)),
    "vllm-leak-large": (VLLM, None, _large_leak),
    "vllm-missing": (VLLM, None, _tripwire(TripwireKind.MISSING, Pool.FULL, (7, 8, 9))),
    "vllm-guard-refused": (VLLM, None, _repaired(RepairKind.REFUSE)),
}


def pages(name: str) -> list[Page]:
    """Every alert firing after scenario ``name``: (alert, severity, description), sorted."""
    worker, strict, scenario = SCENARIOS[name]
    clock = FakeClock()
    detector = Detector(DetectorConfig(), clock)
    stream = RankStream(clock, worker=worker, strict=strict)
    for snap in scenario(stream, clock):
        detector.observe(snap)
    firing = [a for a in detector.evaluate() if a.state is AlertState.FIRING]
    return sorted((a.name, a.severity.value, a.annotations["description"]) for a in firing)

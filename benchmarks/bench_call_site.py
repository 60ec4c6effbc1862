"""What capturing the engine's call site costs: µs per capture, and what the recorders add per finding.

A stand-in engine package (``benchengine``, its code compiled under ``<root>/benchengine/*.py``)
calls down ``depth`` of its own frames into a probe-side function that sits under ``probe``
frames of poolwatch-like code (another package), as the real stacks are:

* **inside a free** (guard's refusal, vLLM's free-time check): 3 probe frames under the engine's;
* **at a hook** (a census finding): 10 probe frames (hook wrapper, ``step``, ``contain``, ``_sample``,
  ``_census``, ``TripwireLog.add`` ...) under the engine's;
* **deep engine**: 30 engine frames (only 8 are kept; the walk stops after 40 frames in all).

Each is timed cold (the memo of file and function names empty: the first capture of a finding in
a fresh process) and warm (the same code seen before).  Then what the recorders cost around it:
``TripwireLog.add`` of a new finding (one capture) and of a repeat (none), ``RepairLog.record`` of
a first refusal on a path (one capture) and of a repeat (none), and a free under an armed
one-shot witness whose check says no.

Run: ``python benchmarks/bench_call_site.py [--runs 20000]``.  Figures, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from poolwatch.model.findings import CallSiteKind, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.core.call_site import CallSites
from poolwatch.probe.core.repairs import RepairLog
from poolwatch.probe.core.tripwires import TripwireLog
from poolwatch.probe.core.witness import FreeWitness

ROOT = "/opt/site-packages"
ENGINE_SRC = """
def descend(depth, then):
    if depth:
        return descend(depth - 1, then)
    return then()
"""
PROBE_SRC = """
def layer(depth, then):
    if depth:
        return layer(depth - 1, then)
    return then()
"""


def _module(name: str, source: str, path: str) -> dict[str, Any]:
    scope: dict[str, Any] = {"__name__": name}
    exec(compile(source, path, "exec"), scope)  # the frames' module is ``name``, their file ``path``
    return scope


def _engine() -> tuple[Callable[..., Any], Callable[..., Any]]:
    package = types.ModuleType("benchengine")
    package.__path__ = [f"{ROOT}/benchengine"]
    sys.modules["benchengine"] = package
    engine = _module("benchengine.scheduler", ENGINE_SRC, f"{ROOT}/benchengine/scheduler.py")
    probe = _module("benchprobe.hooks", PROBE_SRC, f"{ROOT}/benchprobe/hooks.py")
    return engine["descend"], probe["layer"]


def _per_call_us(fn: Callable[[], Any], runs: int) -> float:
    """The median of 5 batches, µs of this thread's CPU time per call (a shared machine's other
    work does not count)."""
    batches = []
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(runs // 5):
            fn()
        batches.append((time.thread_time() - t0) / (runs // 5) * 1e6)
    return statistics.median(batches)


def captures(runs: int) -> None:
    descend, layer = _engine()
    print("capture (µs per capture; the engine's frames kept, innermost first)")
    for label, engine_depth, probe_depth in (
        ("inside a free: 8 engine + 3 probe frames", 8, 3),
        ("at a hook: 8 engine + 10 probe frames", 8, 10),
        ("deep engine: 30 engine + 3 probe frames", 30, 3),
    ):
        warm, cold, kept = _capture_costs(descend, layer, engine_depth, probe_depth, runs)
        print(f"  {label:46s} kept {kept}  warm {warm:6.2f} µs  cold {cold:6.2f} µs")


def _capture_costs(
    descend: Callable[..., Any], layer: Callable[..., Any], engine: int, probe: int, runs: int
) -> tuple[float, float, int]:
    """µs per capture warm and cold (the walk to it subtracted), and the frames kept."""
    sites = CallSites("benchengine")

    def call() -> Any:
        return descend(engine, lambda: layer(probe, lambda: sites.capture(1)))

    def walk() -> Any:
        return descend(engine, lambda: layer(probe, lambda: None))

    def cold() -> Any:
        sites._frames.clear()
        return call()

    site = call()
    assert site is not None
    base = _per_call_us(walk, runs)
    return _per_call_us(call, runs) - base, _per_call_us(cold, max(1000, runs // 10)) - base, len(site.frames)


def recorders(runs: int) -> None:
    descend, layer = _engine()
    print("recorders (µs per call, at the 'inside a free' depth)")
    wire = Tripwire(TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (3,), "free", 1)
    tripwires = TripwireLog(sites=CallSites("benchengine"))

    def new_finding() -> None:
        tripwires._found.clear()
        tripwires._seen.clear()
        descend(8, lambda: layer(3, lambda: tripwires.add([wire])))

    def repeat() -> None:
        descend(8, lambda: layer(3, lambda: tripwires.add([wire])))

    base = _per_call_us(lambda: descend(8, lambda: layer(3, lambda: None)), runs)
    for label, fn in (("a new finding (captures)", new_finding), ("a repeat (captures nothing)", repeat)):
        print(f"  TripwireLog.add, {label:32s} {_per_call_us(fn, runs) - base:6.2f} µs")
    repairs = RepairLog(CallSites("benchengine"))
    import logging

    logging.getLogger("poolwatch.probe").disabled = True  # time the record, not the log handler

    def first() -> None:
        repairs._sites.clear()
        descend(
            8,
            lambda: layer(3, lambda: repairs.record(RepairKind.REFUSE, Pool.MAMBA, (3,), ("r",), "free", 1)),
        )

    def again() -> None:
        descend(
            8,
            lambda: layer(3, lambda: repairs.record(RepairKind.REFUSE, Pool.MAMBA, (3,), ("r",), "free", 1)),
        )

    print(f"  RepairLog.record, first on its path (captures)     {_per_call_us(first, runs) - base:6.2f} µs")
    print(f"  RepairLog.record, a repeat (captures nothing)      {_per_call_us(again, runs) - base:6.2f} µs")

    class Pool_:
        def free(self, ids: list[int]) -> None:
            return None

    pool = Pool_()
    bare = _per_call_us(lambda: pool.free([1]), runs)
    witness = FreeWitness(CallSites("benchengine"), lambda site: None, lambda: 1)
    witness.arm(pool, "free", lambda ids: 99 in ids)
    armed = _per_call_us(lambda: pool.free([1]), runs)
    print(f"  a free under an armed witness (its check says no)  {armed - bare:6.2f} µs over the bare free")
    witness.disarm()
    kind = CallSiteKind.NEXT_FREE.value
    print(f"  (a witness that fires captures once, kind {kind}, then the free is bare again)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, {args.runs} calls per figure (median of 5 batches)")
    captures(args.runs)
    recorders(args.runs)


if __name__ == "__main__":
    main()

"""What the in-loop benchmarks share (``bench_probe_vllm.py``, ``bench_probe.py``): the probe's
time measured from inside a scheduler's loop, and each release run in its own venv.

:class:`Meter` wraps a probe's entry points on the instance (the hooks the wrapped scheduler calls,
and the free-time look) and its sample.  Every call is timed on the monotonic clock
(``perf_counter``: a vDSO read, about 1.6 µs cold right after the GPU wait on the development VM and
0.1 µs warm), so the share of the thread is *probe seconds / (the loop's CPU seconds + its GPU
waits)*; the loop's own CPU time is the thread's CPU clock, read once around the run.  A probe call
preempted by another process is charged the time it waited (the figure is an upper bound on a busy
machine: the table prints the load average).  The timing's own cost is included, and
:meth:`Meter.calibrate` measures it in the loop's conditions (the table prints its bound and the
share less it).  The thread's CPU clock, which an earlier meter read at every call, is a system call
here: 7 µs cold, more than some hooks, and it inflated the share by about 0.1 point on vLLM.  Each
sample's CPU cost is kept apart (with whether a walk -- a census -- ran inside it).  Figures, never
assertions.

What a run reports, and how the runs across releases are collected and printed:
:mod:`loop_report`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # rigs/ (the checkout's root)

GPU_STEP_S = 0.020  # made-up GPU time per engine step: the thread sleeps it, as it waits on the GPU


@dataclass
class Meter:
    """The probe's time inside one run of the loop."""

    spent: float = 0.0  # seconds inside any of the probe's entry points (monotonic clock)
    samples: list[float] = field(default_factory=list)  # CPU seconds of each sample (walks aside)
    walks: list[float] = field(default_factory=list)  # CPU seconds of each sample that walked
    by_entry: dict[str, float] = field(default_factory=dict)  # seconds per entry point
    calls: int = 0  # timed calls (a hook inside another counted once)
    timer: float = 0.0  # seconds the timing itself adds to one cold call (calibrate)
    engine_calls: int = 0  # the engine's own methods timed apart inside an entry point
    engine_timer: float = 0.0  # seconds setting one apart adds to its entry point's (calibrate)
    stopped: bool = False  # the loop is over: what the probe does after it is not the loop's (stop)
    _depth: int = 0
    # per entry point in progress (outermost, innermost last): seconds of the engine's own methods it called
    _engine: list[list[float]] = field(default_factory=list)

    def wrap(self, probe: Any, hooks: Sequence[str]) -> None:
        """Time ``hooks`` (entry points) and the probe's sample on the instance."""
        for name in hooks:
            setattr(probe, name, self.entry(name, getattr(probe, name)))
        sample = probe._sample

        def timed_sample(*args: Any, **kwargs: Any) -> Any:
            walks = probe.census_total
            t0 = time.thread_time()
            try:
                return sample(*args, **kwargs)
            finally:
                took = time.thread_time() - t0
                if not self.stopped:
                    (self.walks if probe.census_total != walks else self.samples).append(took)

        probe._sample = timed_sample

    def stop(self) -> None:
        """The loop is over: a sample asked for afterwards (the figures' final read, which may walk)
        is not counted -- it is no entry point's, so it would count as a walk the share never paid."""
        self.stopped = True

    def clear(self) -> None:
        """Forget what was timed so far (the loop starts now)."""
        self.spent = 0.0
        self.samples, self.walks, self.by_entry, self.calls, self.engine_calls = [], [], {}, 0, 0
        self.stopped = False

    def calibrate(self, rounds: int = 40) -> None:
        """What timing a call costs in the loop's conditions: an empty call timed as an entry point
        is, right after a GPU wait and some of the loop's work, and what an engine method set apart
        inside one adds (guard's wrappers on SGLang).  The first entry point after each GPU wait
        pays about this, the others less; the table prints the bound."""
        plain = self.entry("(calibration)", lambda: None)
        inner = self.engine(lambda: None)
        nested = self.entry("(calibration)", inner)
        took: dict[Any, list[float]] = {plain: [], nested: []}
        for _ in range(rounds):
            for call, times in took.items():
                time.sleep(GPU_STEP_S)
                sum(range(20_000))  # some of the loop's own work between the wait and the hook
                before = self.spent
                call()
                times.append(self.spent - before)
        self.timer = statistics.median(took[plain])
        self.engine_timer = max(0.0, statistics.median(took[nested]) - self.timer)
        self.clear()

    def entry(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` timed as one of the probe's entry points (an entry inside another counts once;
        the engine's own methods it calls, made with :meth:`engine`, do not count)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            if self._depth == 1:
                self._engine.append([0.0])
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:  # a hook called inside another is counted once
                    took = time.perf_counter() - t0 - self._engine.pop()[0]
                    self.calls += 1
                    self.spent += took
                    self.by_entry[name] = self.by_entry.get(name, 0.0) + took

        return timed

    def engine(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The engine's own method that a probe's wrapper calls (guard's, around SGLang's free): its
        time is not the probe's; an entry point reached inside it is timed on its own."""

        def own(*args: Any, **kwargs: Any) -> Any:
            depth, self._depth = self._depth, 0
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._depth = depth
                if depth:  # (an entry point reached inside it kept an account of its own)
                    self._engine[-1][0] += time.perf_counter() - t0
                    self.engine_calls += 1

        return own


@dataclass(frozen=True)
class Figures:
    """One run of the loop: what the tables print."""

    case: str
    steps: int
    wall_s: float
    cpu_s: float  # the loop's CPU seconds on its thread, probe included
    step_s: float  # mean seconds of a step on a machine of its own: its CPU + the GPU wait
    spent_s: float  # the probe's seconds (monotonic clock, inside its entry points)
    samples: int
    median_us: float  # a sample without a walk
    p99_us: float
    walks: int
    walk_ms: float  # the longest walk
    walk_total_s: float = 0.0  # CPU seconds of every sample that walked
    gap: int | None = None  # the conservation gap at the end (a leak's size)
    load: float = 0.0  # the 1-minute load average at the end
    by_entry: dict[str, float] = field(default_factory=dict)  # the probe's seconds per entry point
    timer_s: float = 0.0  # seconds the meter's timing adds at most (calls x a cold call's cost)

    @property
    def share(self) -> float:
        """Percent of the thread's time on a machine of its own (the probe's calls over the loop's CPU
        time plus its GPU waits), the meter's own timing included (:meth:`Meter.calibrate` says
        what a cold timed call adds)."""
        return self.spent_s / (self.cpu_s + self.steps * GPU_STEP_S) * 100

    @property
    def share_sampling(self) -> float:
        """:attr:`share` less the walks (a census's cost is spaced out by the probe's budget, 0.2 %
        of the thread: a short run that took one walk shows it whole)."""
        return (self.spent_s - self.walk_total_s) / (self.cpu_s + self.steps * GPU_STEP_S) * 100

    @property
    def share_less_meter(self) -> float:
        """:attr:`share` less the meter's own timing at its bound (every timed call charged a cold
        call's cost): the probe's own share, as a deployment without the meter pays it -- a lower
        bound, since a warm call's timing costs less than a cold one's."""
        return (self.spent_s - self.timer_s) / (self.cpu_s + self.steps * GPU_STEP_S) * 100

    @property
    def wall_share(self) -> float:
        """Percent of the run's wall time (inflated by the machine's load)."""
        return self.spent_s / self.wall_s * 100


def figures(case: str, meter: Meter, steps: int, wall: float, cpu: float, gap: int | None = None) -> Figures:
    xs = sorted(meter.samples) or [0.0]
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    return Figures(
        case=case,
        steps=steps,
        wall_s=wall,
        cpu_s=cpu,
        step_s=cpu / max(steps, 1) + GPU_STEP_S,
        spent_s=meter.spent,
        samples=len(meter.samples),
        median_us=statistics.median(xs) * 1e6,
        p99_us=p99 * 1e6,
        walks=len(meter.walks),
        walk_ms=max(meter.walks, default=0.0) * 1e3,
        walk_total_s=sum(meter.walks),
        gap=gap,
        load=os.getloadavg()[0],
        by_entry=dict(meter.by_entry),
        timer_s=meter.calls * meter.timer + meter.engine_calls * meter.engine_timer,
    )

"""How often the probe samples while busy: the configured interval, stretched so that the cheap
samples never take more than a budgeted share of the scheduler thread.

A sample's cost follows what it reads -- every live request's fields, once -- so it grows with the
batch: a few hundred microseconds at 256 live requests on real SGLang classes, a few milliseconds
at a few thousand.  A fixed interval would make the probe's share of the scheduler thread grow with
the batch too.  The pacer keeps it bounded instead: the next busy sample is due after

    max(sample_interval_s, recent cost / sample_budget)

seconds, where the recent cost is the median of the last :data:`WINDOW` samples' (one slow sample,
a garbage collection or a GIL wait, does not stretch the interval), and never later than
:data:`MAX_INTERVAL_S` (a gap is always seen within that, whatever the batch).  Only the busy
cadence is paced: the first idle hook after work (where the engine's own idle check looks), a
forced sample and the censuses (which have their own budget, :mod:`~.schedule`) are not, and the
idle sample does not restart the busy clock (bursts of work shorter than the paced interval, a
second each between idle moments, are still sampled while they hold slots).  An
interval of 0 (the rigs and tests: a sample at every hook) or a budget of 0 turns pacing off.

What it costs the watcher: at 256 live requests, at the default budget (0.05 %), a gap is exported
within about 1 s on vLLM and 2-4 s on SGLang instead of 0.1 s (docs/benchmarks.md), inside any
scrape interval, the detector's ``for`` windows and the sidecar's ``stale_after`` (10 s).  The
ceiling is a safety bound, not the pace: it is set above what a sample at 256 live requests costs
cold in SGLang's loop (0.8 - 1.9 ms, 1.6 - 3.8 s at the budget), so the budget holds there; at
2 s it bound first and the samples took 0.05 - 0.09 % instead (docs/benchmarks.md#guard-loop).
Fresher busy samples are a larger budget (``POOLWATCH_PROBE_SAMPLE_BUDGET``).  What is named at
once is not paced: vLLM's free-time tripwire, SGLang's chunk tripwire and guard's refusals (when
guard is on), and the first idle hook's sample, which comes before the engine's own idle check.
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["MAX_INTERVAL_S", "WINDOW", "SamplePacer"]

WINDOW = 5  # samples whose median cost paces the next
MAX_INTERVAL_S = 4.0  # the longest a busy rank goes without a sample, whatever a sample costs


class SamplePacer:
    """The busy sample interval from the configured one, the budget and the recent costs."""

    def __init__(self, interval_s: float, budget: float) -> None:
        self.interval_s, self.budget = interval_s, budget
        self._costs: deque[float] = deque(maxlen=WINDOW)
        self.current_s = interval_s  # the interval in force now

    def record(self, cost_s: float) -> None:
        """A busy sample took ``cost_s`` seconds of the scheduler thread (its census aside)."""
        if self.interval_s <= 0 or self.budget <= 0:
            return
        self._costs.append(max(cost_s, 0.0))
        paced = statistics.median(self._costs) / self.budget
        self.current_s = min(max(self.interval_s, paced), max(self.interval_s, MAX_INTERVAL_S))

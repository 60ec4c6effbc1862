"""The last word waits, bounded: hold a rank that is about to die until its sidecar has the proof.

An engine room knows when its rank dies next: SGLang's strict idle check is certain to raise
(:func:`~poolwatch.probe.sglang.final.check_fails`: the final snapshot is written and published, the
check runs microseconds later), and vLLM's block freed at ``ref_cnt`` 0 fails vLLM's assert at the
block's next allocation (one step later under load).  The page leaves from the sidecar (long-poll ->
Alertmanager -> receiver), and the crash sometimes beat it (issue 23; vLLM under load, issue 32).
So the scheduler thread -- its rank about to die anyway -- waits (``Probe.last_words``) until the
endpoint has *handed* that snapshot (or a later one) to a client
(:meth:`~poolwatch.probe.core.publication.Publication.served`: the explicit signal the sidecar's
long-poll produces), then a grace for the page's way on (the sidecar's Alertmanager post,
Alertmanager's dispatch to the receivers: it is what a loaded machine slows;
``POOLWATCH_PROBE_LAST_WORD_GRACE``), never more than the bound (``POOLWATCH_PROBE_LAST_WORD_WAIT``).
No one collecting (nothing served and no long-poll for :data:`ATTENDED_S`), a bound of 0, or an
endpoint that serves nothing: no wait at all.
Cost: a crash that is already certain comes at most the bound later; a healthy rank never waits.
Never raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import Protocol

__all__ = ["ATTENDED_S", "GRACE_S", "Collected", "Outcome", "await_collection"]

ATTENDED_S = 30.0  # a collector seen this recently (or blocked in a long-poll now) counts as attached
# after the hand-over: the sidecar's POST, Alertmanager's dispatch and the receiver (20-50 ms on a
# quiet 2-core machine, 140-260 ms at load 10, up to 0.5 s at load 6-8 with three test runs beside
# it: docs/benchmarks.md, the vLLM page); the default of ``POOLWATCH_PROBE_LAST_WORD_GRACE``; the
# bound caps it
GRACE_S = 0.25


class Outcome(Enum):
    OFF = "off"  # bound 0 or nothing served: no wait
    UNATTENDED = "unattended"  # no one collects: no wait
    COLLECTED = "collected"  # handed over (then the grace)
    TIMED_OUT = "timed_out"  # the bound passed first


class Collected(Protocol):
    """What :func:`await_collection` needs of the publication."""

    def attended(self, within: float) -> bool: ...

    def wait_served(self, seq: int, timeout: float, version: int = 0) -> bool: ...


def await_collection(
    publication: Collected | None,
    seq: int,
    bound: float,
    *,
    version: int = 0,
    grace: float = GRACE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> Outcome:
    """Wait (scheduler thread) until a client was handed the snapshot ``seq`` (as published at
    ``version`` or later, when given), plus ``grace`` seconds, all within ``bound`` seconds.
    ``publication`` None: the probe serves nothing."""
    if publication is None or bound <= 0:
        return Outcome.OFF
    if not publication.attended(ATTENDED_S):
        return Outcome.UNATTENDED
    started = clock()
    if not publication.wait_served(seq, bound, version):
        return Outcome.TIMED_OUT
    left = bound - (clock() - started)
    if left > 0:
        sleep(min(grace, left))
    return Outcome.COLLECTED

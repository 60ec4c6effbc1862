"""Whether a scheduler rank moves its queue: what the probe counts between step boundaries.

Queue depths alone cannot tell a busy scheduler from a stuck one: a full batch with requests
waiting is load, a scheduler that admits nothing while capacity is free is a stall.  So the probe
keeps, per rank, monotonic counters (requests admitted to run, preemptions, and preemptions that
could give nothing back at once: the victim's capacity fenced by a step still in flight, vLLM 0.24 -
0.29's cascade) and the current stall: how many step boundaries have passed, and since when, with
requests that could be admitted waiting and nothing progressing (no request admitted, no token
computed, none finished).  A request waiting for something outside the scheduler (remote KV, a
grammar, a streamed input) is not *admittable*: a PD decode rank waiting for its transfers is not
stalled.  Counts and ids only; the verdict (how many steps, how long, with how much capacity free)
is the sidecar's (:mod:`poolwatch.detect.families.stall`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_VICTIMS", "Progress"]

MAX_VICTIMS = 16  # recent fruitless preemptions kept (time and victim), newest last


@dataclass(frozen=True, slots=True)
class Progress:
    """One rank's scheduler progress at one sample."""

    admitted: int = 0  # requests admitted to run since the probe started (a counter)
    preempted: int = 0  # preemptions since the probe started (a counter; None-like 0 where unseen)
    fruitless: int = 0  # preemptions whose victim's capacity could not return at once (a counter)
    waiting: int = 0  # requests waiting that the scheduler could admit now
    stalled_steps: int = 0  # step boundaries without progress while ``waiting`` > 0 (0: moving)
    stalled_since: float = 0.0  # unix seconds the stall began (0.0: not stalled)
    head: tuple[str, ...] = ()  # the first few admittable waiting requests (inert ids), when stalled
    # the latest fruitless preemptions: (unix seconds, inert victim id), oldest first
    recent: tuple[tuple[float, str], ...] = ()
    preemptions_seen: bool = True  # False: this engine's preemptions are not observed (counters stay 0)

    def stalled_for(self, at: float) -> float:
        """Seconds the current stall has lasted at ``at`` (0 when not stalled)."""
        return max(0.0, at - self.stalled_since) if self.stalled_steps else 0.0

    def fruitless_within(self, at: float, window: float) -> tuple[tuple[float, str], ...]:
        """The recent fruitless preemptions no older than ``window`` seconds at ``at``."""
        return tuple(r for r in self.recent if at - r[0] <= window)

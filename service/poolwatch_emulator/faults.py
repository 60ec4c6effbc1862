"""Injectable faults: when and where each fault of the catalogue (:mod:`poolwatch_emulator.catalogue`,
every fault with its pool, sign, releases and real issue) strikes.

A spec is ``NAME`` (the first chance), ``NAME@30s`` (the first chance at or after 30 simulated
seconds; ``ms``/``m``/``h`` also work), ``NAME@step=500`` (at or after scheduler iteration 500)
or ``NAME@p=0.01`` (every chance with probability 0.01).  A fault fires at a *chance*: an event
of the kind the real bug needed (a chunk boundary, an abort of a waiting COW holder, a paged draft
over-allocation, a write-through ack, ...).  A *sticky* fault (``FaultInfo.sticky``: a release's
code path rather than one event, such as acks drained only by the prefill batch builder) strikes
at every chance once its time has come.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from poolwatch_emulator.catalogue import FAULTS, FaultInfo

__all__ = ["FAULTS", "FaultInfo", "FaultPlan", "FaultSpec", "parse_fault"]


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One injection: a fault and its trigger (exactly one of at_s, at_step, probability)."""

    name: str
    at_s: float | None = None
    at_step: int | None = None
    probability: float | None = None

    def __str__(self) -> str:
        if self.probability is not None:
            return f"{self.name}@p={self.probability:g}"
        if self.at_step is not None:
            return f"{self.name}@step={self.at_step}"
        return f"{self.name}@{self.at_s or 0:g}s"


_TIME = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_fault(text: str) -> FaultSpec:
    """Parse ``NAME[@30s|@step=500|@p=0.01]``; a clear ``ValueError`` otherwise."""
    name, _, trigger = text.strip().partition("@")
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r} in {text!r}; known: {', '.join(FAULTS)}")
    if not trigger:
        return FaultSpec(name, at_s=0.0)
    if trigger.startswith("step="):
        step = trigger[5:]
        if not step.isdigit():
            raise ValueError(f"fault {text!r}: step must be a non-negative integer, got {step!r}")
        return FaultSpec(name, at_step=int(step))
    if trigger.startswith("p="):
        try:
            p = float(trigger[2:])
        except ValueError:
            raise ValueError(f"fault {text!r}: p must be a number, got {trigger[2:]!r}") from None
        if not 0.0 < p <= 1.0:
            raise ValueError(f"fault {text!r}: p must be in (0, 1], got {p}")
        return FaultSpec(name, probability=p)
    match = _TIME.match(trigger)
    if match is None:
        raise ValueError(f"fault {text!r}: trigger must be like 30s, 500ms, 2m, 1h, step=500 or p=0.01")
    return FaultSpec(name, at_s=float(match[1]) * _UNITS[match[2]])


class FaultPlan:
    """The faults of one scheduler rank.  TP ranks of one DP group get the same seed and see the
    same chances, so they decide alike and keep identical bookkeeping."""

    def __init__(self, specs: tuple[FaultSpec, ...] = (), *, seed: int = 0):
        self.specs = specs
        self._rng = random.Random(seed)
        self._spent: set[int] = set()
        self.fired: Counter[str] = Counter()
        self.now = 0.0
        self.step = 0

    def fires(self, name: str) -> bool:
        """Whether fault ``name`` strikes at this chance (and count it when it does)."""
        hit = False
        for i, spec in enumerate(self.specs):
            if spec.name == name and self._strikes(i, spec):
                hit = True
        if hit:
            self.fired[name] += 1
        return hit

    def _strikes(self, i: int, spec: FaultSpec) -> bool:
        if spec.probability is not None:
            return self._rng.random() < spec.probability
        if i in self._spent:
            return False
        due = self.step >= spec.at_step if spec.at_step is not None else self.now >= (spec.at_s or 0.0)
        if due and not FAULTS[spec.name].sticky:
            self._spent.add(i)
        return due

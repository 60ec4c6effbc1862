"""Injectable faults: each a named reproduction of a real SGLang accounting bug class.

=============================  =====  ========  ====================  ===================================
name                           pool   sign      SGLang affected       real issue / PR
=============================  =====  ========  ====================  ===================================
pd-chunked-mamba-double-free   mamba  surplus   0.5.4 - 0.5.5.post1   #12432, fixed by PR #12994
mamba-cow-leak-on-abort        mamba  deficit   <= 0.5.4.post3;       PR #12693; #20010 -> PR #21404
                                                0.5.5 - 0.5.9
full-kv-leak-on-retract        full   deficit   0.5.3.post3           #11970 -> PR #12224
pd-decode-abort-kv-leak        full   deficit   before PR #9817       PR #9817
swa-page-overcount             swa    surplus   0.5.12 (spec, paged)  #27789
hicache-host-leak              host   deficit   (fault class)         none filed (SGLang checks no host
hicache-host-double-free       host   surplus   (fault class)         conservation; 0.5.23 guards frees)
=============================  =====  ========  ====================  ===================================

* ``pd-chunked-mamba-double-free``: at a PD prefill chunk boundary ``process_prefill_chunk``
  frees the chunked request's row through ``HybridReqToTokenPool.free``'s
  ``free_mamba_cache=True`` default, so its Mamba slot goes back on the free list while the
  request keeps using it (the seed incident): one surplus slot per affected boundary, full KV
  balanced.  Only 0.5.4.post1 can be given it (since 0.5.9 the row is kept across chunks).
* ``mamba-cow-leak-on-abort``: a waiting request that holds a copy-on-write Mamba slot from
  ``match_prefix`` is aborted and the slot is never freed: one lost slot.
* ``full-kv-leak-on-retract``: a retracted decode request's last KV page is never freed.
* ``pd-decode-abort-kv-leak``: a PD decode request aborted after its KV was preallocated keeps
  its KV (the row and Mamba slot are freed): all its preallocated slots are lost.
* ``swa-page-overcount``: a finishing request's last sliding-window page is freed twice: a
  surplus of one page on the SWA pool.
* ``hicache-host-leak``: a HiCache write-through allocates host slots and puts them on no node.
* ``hicache-host-double-free``: a HiCache write-through's host slots go back on the host free list
  while the node keeps them (a later backup can be given the same host slots).

A spec is ``NAME`` (the first chance), ``NAME@30s`` (the first chance at or after 30 simulated
seconds; ``ms``/``m``/``h`` also work), ``NAME@step=500`` (at or after scheduler iteration 500)
or ``NAME@p=0.01`` (every chance with probability 0.01).  A fault fires at a *chance*: an event
of the kind the real bug needed (a chunk boundary, an abort of a waiting COW holder, ...).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["FAULTS", "FaultInfo", "FaultPlan", "FaultSpec", "parse_fault"]


@dataclass(frozen=True, slots=True)
class FaultInfo:
    """What a fault breaks, where it is possible, and which real bug it reproduces."""

    name: str
    pool: str  # a poolwatch.model.rank.Pool value
    sign: str  # "surplus" (double free, gap < 0) or "deficit" (leak, gap > 0)
    sglang_versions: str
    reference: str
    roles: tuple[str, ...]  # worker roles where it can fire
    needs: str  # "mamba", "swa" or "" (the model shape it needs)
    emulated_versions: tuple[str, ...]
    summary: str


_ALL = ("0.5.4.post1", "0.5.9", "0.5.12")

FAULTS: dict[str, FaultInfo] = {
    f.name: f
    for f in (
        FaultInfo(
            "pd-chunked-mamba-double-free", "mamba", "surplus", "0.5.4 - 0.5.5.post1",
            "sglang#12432 / PR #12994", ("prefill",), "mamba", ("0.5.4.post1",),
            "PD prefill chunk boundary frees the chunked request's Mamba slot (free_mamba_cache default)",
        ),
        FaultInfo(
            "mamba-cow-leak-on-abort", "mamba", "deficit", "<= 0.5.4.post3 and 0.5.5 - 0.5.9",
            "PR #12693; sglang#20010 / PR #21404", ("prefill", "unified"), "mamba", _ALL,
            "an aborted waiting request's copy-on-write Mamba slot is never freed",
        ),
        FaultInfo(
            "full-kv-leak-on-retract", "full", "deficit", "0.5.3.post3",
            "sglang#11970 / PR #12224", ("decode", "unified"), "", _ALL,
            "a retracted request's last KV page is never freed",
        ),
        FaultInfo(
            "pd-decode-abort-kv-leak", "full", "deficit", "before PR #9817 (2025-08)",
            "PR #9817", ("decode",), "", _ALL,
            "a PD decode request aborted after KV preallocation keeps its KV slots",
        ),
        FaultInfo(
            "swa-page-overcount", "swa", "surplus", "0.5.12 (speculative decoding, page_size > 1)",
            "sglang#27789", ("prefill", "unified"), "swa", _ALL,
            "a finishing request's last sliding-window page is freed twice",
        ),
        FaultInfo(
            "hicache-host-leak", "host", "deficit", "no release known (SGLang checks no host conservation)",
            "fault class, no issue filed", ("prefill", "unified"), "hicache", _ALL,
            "a HiCache write-through's host slots are allocated and put on no tree node",
        ),
        FaultInfo(
            "hicache-host-double-free", "host", "surplus", "no release known (0.5.23 asserts on it)",
            "fault class, no issue filed", ("prefill", "unified"), "hicache", _ALL,
            "a HiCache write-through's host slots are freed while the tree node keeps them",
        ),
    )
}  # fmt: skip


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
        if due:
            self._spent.add(i)
        return due

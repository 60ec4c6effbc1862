"""The admission-stall family: PoolwatchAdmissionStall, a scheduler that does not move its queue.  Pure.

The probe counts its rank's progress (:mod:`poolwatch.model.progress`): requests admitted, tokens
computed, requests finished, and the current stall -- step boundaries, and seconds, without any of
those while requests the scheduler could admit wait.  Load is not a stall (a full batch moves), nor
is a PD decode rank waiting for its transfers (those requests are not admittable).  Two ways fire it:

* **stalled** (critical): ``stall_steps`` step boundaries and ``stall_for`` seconds without progress,
  admittable requests waiting, and every device pool (full, SWA, Mamba, request rows) at least
  ``stall_free_fraction`` free or evictable -- the "KV cache has room, nothing is admitted, health
  check green" incident (an encoder-cache deadlock, a queue blocked by a stranded transfer);
* **fruitless preemptions** (warning): ``stall_fruitless`` preemptions within ``stall_window`` whose
  victim's capacity could not return at once (its blocks fenced by a step still in flight), so the
  preemption bought no room and cascades to the next victim (vLLM 0.24-0.29, #49674).

Both are read off one snapshot (its ages are ``taken_at``'s), so the rules fire at the same sample,
``for: 0s``.  A snapshot that reports progress is a verdict on its rank's alert; others say nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.charts import Chart, Line
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Seen, uses, where
from poolwatch.detect.outcome import facts
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.detect.thresholds import Thresholds, threshold
from poolwatch.model.progress import Progress
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot

__all__ = ["ADMISSION_STALL", "FAMILY", "AdmissionStall", "StallThresholds", "free_shares"]

ADMISSION_STALL = "PoolwatchAdmissionStall"
ADMITTING = (Pool.FULL, Pool.SWA, Pool.MAMBA, Pool.REQ)  # the pools a request needs room in to be admitted
_ADMITTING = "|".join(p.value for p in ADMITTING)


@dataclass(frozen=True, slots=True)
class StallThresholds(Thresholds):
    """When a scheduler that does not move pages."""

    stall_steps: int = threshold(
        20, "step boundaries without progress, with admittable requests waiting, before a stall fires"
    )
    stall_for: float = threshold(30.0, "seconds a stall must last before it fires")
    stall_free_fraction: float = threshold(
        0.1, "share of every device pool that must be free or evictable for a stall to fire", share=True
    )
    stall_fruitless: int = threshold(
        3, "preemptions that free nothing at once (fenced victims) within the window that fire a stall"
    )
    stall_window: float = threshold(300.0, "seconds over which fruitless preemptions are counted")


def free_shares(snap: Snapshot) -> dict[Pool, float]:
    """The share of each admitting pool that is free or evictable (pools whose figures are known)."""
    out = {}
    for pool in ADMITTING:
        a = snap.pools.get(pool)
        if a is not None and a.size and a.available is not None:
            out[pool] = min(1.0, (a.available + (a.evictable or 0)) / a.size)
    return out


class AdmissionStall(Judge):
    """The family's judge: every snapshot that reports its scheduler's progress."""

    def signals(self, seen: Seen) -> list[Signal]:
        snap, cfg = seen.snap, self.config.of(StallThresholds)
        p = snap.progress
        if p is None or not (p.stalled_steps or p.recent):
            return []
        labels = rank_labels(snap.worker)
        stalled = self._stalled(snap, p)
        if stalled is not None:
            return [
                Signal(
                    ADMISSION_STALL,
                    sampled_subject(snap),
                    Severity.CRITICAL,
                    labels,
                    stalled,
                    p.stalled_steps,
                )
            ]
        fruitless = p.fruitless_within(snap.taken_at, cfg.stall_window)
        if len(fruitless) < cfg.stall_fruitless:
            return []
        victims = ", ".join(f"'{v}'" for _, v in fruitless[-6:])
        entry = facts(snap.worker.engine)
        text = (
            f"{len(fruitless)} preemptions on {where(snap)} within {cfg.stall_window:g} s gave no room "
            f"back at once (the victims' {entry.unit}s were fenced by a step still in flight), so each "
            f"retry preempted another request: {victims}. {entry.title} recomputes every victim's tokens "
            "from scratch: throughput collapses while the cascade lasts, and it can end with the whole "
            "batch preempted and nothing scheduled."
        )
        return [
            Signal(ADMISSION_STALL, sampled_subject(snap), Severity.WARNING, labels, text, len(fruitless))
        ]

    def _stalled(self, snap: Snapshot, p: Progress) -> str | None:
        cfg = self.config.of(StallThresholds)
        lasted = p.stalled_for(snap.taken_at)
        if not p.waiting or p.stalled_steps < cfg.stall_steps or lasted < cfg.stall_for:
            return None
        shares = free_shares(snap)
        if not shares or min(shares.values()) < cfg.stall_free_fraction:
            return None  # out of room: load or a leak, the other families' business
        room = ", ".join(f"{pool.value} {share:.0%}" for pool, share in shares.items())
        head = ", ".join(f"'{r}'" for r in p.head[:4])
        first = f" (first in line: {head})" if head else ""
        entry = facts(snap.worker.engine)
        return (
            f"{where(snap)} has admitted, computed and finished nothing for {p.stalled_steps} steps "
            f"({lasted:.0f} s) while {p.waiting} request(s) it could admit wait{first}, with room free "
            f"({room}). {entry.title} will not fail on this: the waiting requests hang until they time out, "
            "and the health check stays green."
        )

    def signature(self, seen: Seen) -> bool:
        """Whether ``seen`` reports progress."""
        return seen.snap.progress is not None

    def judged(self, seen: Seen) -> set[Verdict]:
        return {(ADMISSION_STALL, rank_labels(seen.snap.worker))} if self.signature(seen) else set()


# --- the Prometheus rules ----------------------------------------------------------------------------


def _short_of_room(d: StallThresholds) -> str:
    """Ranks with an admitting pool less than the free share: not a stall, whatever waits."""
    room = f'sum without (state) (poolwatch_pool_slots{{state=~"available|evictable",pool=~"{_ADMITTING}"}})'
    share = f'{room}\n    / poolwatch_pool_capacity_slots{{pool=~"{_ADMITTING}"}}'
    return f"min without (pool) (\n    {share}\n  ) < {d.stall_free_fraction:g}"


def _stalled(config: MixinConfig) -> str:
    d = config.detector.of(StallThresholds)
    return (
        f"poolwatch_scheduler_stalled_steps >= {d.stall_steps}\n"
        f"and poolwatch_scheduler_stalled_seconds >= {d.stall_for:g}\n"
        "and poolwatch_scheduler_waiting_admittable > 0\n"
        f"unless {q.rank_on(config.cluster_label)} (\n  {_short_of_room(d)}\n)"
    )


def _fruitless(d: StallThresholds) -> str:
    total = "poolwatch_scheduler_fruitless_preemptions_total"
    window = q.duration(d.stall_window)
    return (
        f"(({total} - {total} offset {window}) >= {d.stall_fruitless})\n"
        f"or ({total} >= {d.stall_fruitless} unless {total} offset {window})"
    )


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector.of(StallThresholds)
    keep = q.duration(config.detector.resolve_hold)
    stalled = _stalled(config)
    return (
        AlertDef(
            ADMISSION_STALL,
            Scope.RANK,
            Mode.SAMPLED,
            "The scheduler admits nothing while requests wait and memory is free, or its preemptions "
            "free nothing.",
            "Critical: no request admitted, computed or finished for many steps while admittable requests "
            "wait and every device pool has room. Warning: repeated preemptions whose victims' capacity "
            "could not return at once (a cascade).",
            (
                PromRule(
                    Severity.CRITICAL,
                    stalled,
                    "0s",
                    f"The scheduler of {q.WHERE} has made no progress for {{{{ $value }}}} steps while "
                    "requests it could admit wait and every pool has room: they hang until they time out.",
                    keep,
                ),
                PromRule(
                    Severity.WARNING,
                    f"({_fruitless(d)})\nunless {q.rank_on(config.cluster_label)} (\n{stalled}\n)",
                    "0s",
                    f"{{{{ $value }}}} preemptions on {q.WHERE} within {q.duration(d.stall_window)} freed "
                    "no capacity at once (their victims were fenced by a step in flight): a preemption "
                    "cascade.",
                    keep,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="stall",
    title="Admission stall",
    about="Whether the scheduler moves its queue: nothing admitted, computed or finished while admittable "
    "requests wait and memory is free, or preemptions that free nothing.",
    metrics=uses(
        "poolwatch_scheduler_stalled_steps",
        "poolwatch_scheduler_stalled_seconds",
        "poolwatch_scheduler_waiting_admittable",
        "poolwatch_scheduler_fruitless_preemptions_total",
        "poolwatch_pool_slots",
        "poolwatch_pool_capacity_slots",
    ),
    alerts=alerts,
    sampled=AdmissionStall,
    thresholds=StallThresholds,
    charts=(
        Chart(
            "Admission and stalls per rank",
            (
                Line("poolwatch_scheduler_admitted_total", "admitted/s $ranks", per_pool=False, over="rate"),
                Line("poolwatch_scheduler_waiting_admittable", "admittable waiting $ranks", per_pool=False),
                Line("poolwatch_scheduler_stalled_steps", "stalled steps $ranks", per_pool=False),
                Line("poolwatch_scheduler_stalled_seconds", "stalled s $ranks", per_pool=False),
            ),
            "short",
            "Requests admitted per second, requests waiting that could be admitted now (not those waiting "
            "for remote KV), and the current stall in steps and seconds (0 while the scheduler moves): "
            f"{ADMISSION_STALL}.",
        ),
        Chart(
            "Preemptions per rank",
            (
                Line("poolwatch_scheduler_preemptions_total", "all $ranks", per_pool=False, over="increase"),
                Line(
                    "poolwatch_scheduler_fruitless_preemptions_total", "fruitless $ranks", False, "increase"
                ),
            ),
            "suffix: preemptions",
            "Requests preempted (vLLM), and those whose capacity could not return at once (fenced by a "
            f"step in flight): a cascade of fruitless ones is {ADMISSION_STALL}'s warning. SGLang's "
            "retractions are not counted.",
            bars=True,
        ),
    ),
)

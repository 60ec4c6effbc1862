"""The counter-witness family: PoolwatchCounterDrift, per device pool.  Pure.

An engine counter the probe's census re-counted from the ids and found off
(:class:`~poolwatch.model.witness.CounterWitness`: SGLang's tree ``evictable``/``protected``
counters against its nodes by lock or its requests' prefixes, vLLM's free-queue count against the
queue walked) is a finding of its own: which counter, by how much, since which census.  It is never
a double free or a leak -- the pool's figures and gap are then the census's, which the balance
family judges -- but it is not harmless either, and what follows is the engine's (the words from
:mod:`poolwatch.detect.outcome`):

* an engine whose idle check sums these counters (SGLang's) sees the pool as the counters say: off
  by the pool's census gap less the drift -- a crash at its next idle moment where that is not zero
  and the check is strict (critical, #12774); nothing where the drift cancels what the ids show
  (warning: the balance family pages the ids, #27666); a counter below zero fails its pool
  statistics' usage assertion, strict or not (critical);
* an engine with no idle check (vLLM): a free count above the queue is a count its allocator
  trusts -- an allocation that takes the last free units walks past the end of the queue and fails
  the engine's assertion (critical); any other drift keeps capacity out of use (warning).

A probe snapshot is a verdict on the alert of every pool it reports (no witness: clean); the
alert fires at once (a census proved it) and holds while the census keeps finding the counter off.
"""

from __future__ import annotations

from poolwatch.conservation import gap
from poolwatch.detect import promql as q
from poolwatch.detect.charts import Chart, Line
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.evidence import witness_sentence
from poolwatch.detect.family import Family, uses, where
from poolwatch.detect.outcome import CHECKERS, UNCHECKED, drift_outcome
from poolwatch.detect.pool_judge import PoolJudge, Said
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.engines import EngineEntry
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.model.witness import CounterWitness

__all__ = ["COUNTER_DRIFT", "FAMILY", "CounterDrift"]

COUNTER_DRIFT = "PoolwatchCounterDrift"


class CounterDrift(PoolJudge[CounterWitness]):
    """The family's judge: every snapshot of a rank-source."""

    ALERT = COUNTER_DRIFT
    DEVICE_ONLY = True  # a probe's census can witness the counters of its device pools

    def found(self, snap: Snapshot) -> tuple[CounterWitness, ...]:
        return snap.witnesses

    def say(self, snap: Snapshot, entry: EngineEntry, pool: Pool, found: list[CounterWitness]) -> Said:
        account = snap.pools.get(pool)
        severity, value, outcome = drift_outcome(snap, found, None if account is None else gap(account))
        said = " ".join(witness_sentence(w, entry.unit) for w in found)
        text = (
            f"An engine counter of the {pool.value} pool of {where(snap)} disagrees with the probe's "
            f"census: {said} No {entry.unit} is lost or freed twice for it: the pool's figures and gap "
            f"are the census's. {outcome}"
        )
        return severity, text, float(value)


# --- the Prometheus rules ----------------------------------------------------------------------------

_DRIFT = "max without (counter) (abs(poolwatch_pool_counter_drift_slots))"
_ABOVE = 'max without (counter) (poolwatch_pool_counter_drift_slots{counter="available"})'
_OF = f"the {{{{ $labels.pool }}}} pool on {q.WHERE}"


def _unchecked_rules(e: EngineEntry, config: MixinConfig, keep: str) -> tuple[PromRule, ...]:
    """An engine with no idle check: a free count above its free queue is an assertion ahead."""
    u, engine = e.unit, q.on_engines((e,), config.cluster_label)
    above = f"({_ABOVE} > 0)\n{engine}"
    critical = (
        f"{e.title}'s free count of {_OF} is {{{{ $value }}}} above what the probe's census counts free "
        f"(the free queue walked; the encoder cache's entries): {e.title} allocates and admits against it -- "
        f"a KV allocation that takes the last free {u}s walks past the end of the queue and fails its "
        "assertion; an encoder cache admits inputs past its size. Drain and restart the worker."
    )
    warning = (
        f"An engine counter of {_OF} is off by {{{{ $value }}}} {u}(s) from the probe's census; no {u} is "
        "lost or freed twice for it. Restart the worker at a quiet moment."
    )
    return (
        PromRule(Severity.CRITICAL, above, "0s", critical, keep, e.name),
        PromRule(
            Severity.WARNING, f"({_DRIFT} > 0\n{engine})\nunless ({above})", "0s", warning, keep, e.name
        ),
    )


def _acts(not_strict: str) -> str:
    """Where an engine with an idle check acts on the drift: its check sees the pool off (the
    counters' sum less the census's gap is not zero) and is strict, or a counter is below zero."""
    below = " or ".join(
        f'(sum without (state) (poolwatch_pool_slots{{state="{f}"}})\n'
        f'   + sum without (counter) (poolwatch_pool_counter_drift_slots{{counter="{f}"}}) < 0)'
        for f in ("protected", "evictable")
    )
    return f"(\n  ({_SEEN}\n  unless {not_strict})\n  or {below}\n)"


_SEEN = (
    "(sum without (counter) (poolwatch_pool_counter_drift_slots)"
    " - poolwatch_pool_conservation_gap_slots) != 0"
)


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    keep, cl = q.duration(config.detector.resolve_hold), config.cluster_label
    off = f"An engine counter of {_OF} is off by {{{{ $value }}}} slot(s) from the probe's census"
    dies = (
        f"{off}, and {CHECKERS} will act on it: its idle check finds the pool off at its next idle moment "
        "and, strict, crashes the server; or a counter below zero fails its pool statistics' usage assertion "
        "at the next metrics or log line. Drain and restart the worker."
    )
    warns = (
        f"{off}; {CHECKERS}'s checks do not act on it here (the idle check is relaxed, or the drift cancels "
        "what the ids show: see the tripwires). Restart the worker at a quiet moment."
    )
    acts = _acts(q.not_strict(cl))
    rules = [
        PromRule(Severity.CRITICAL, q.apart(f"{_DRIFT} > 0\nand {acts}", UNCHECKED, cl), "0s", dies, keep),
        PromRule(Severity.WARNING, q.apart(f"{_DRIFT} > 0\nunless {acts}", UNCHECKED, cl), "0s", warns, keep),
    ]
    for e in UNCHECKED:
        rules.extend(_unchecked_rules(e, config, keep))
    return (
        AlertDef(
            COUNTER_DRIFT,
            Scope.POOL,
            Mode.SAMPLED,
            "An engine's own pool counter disagrees with the probe's census of the ids; the census is right.",
            "Counter witness: a counter the engine's checks read (a tree's evictable or protected count, a "
            "free count) is off from the same quantity counted from the ids by the probe's census; never a "
            "double free or a leak. Fires at once; critical where the engine will act on the wrong count.",
            tuple(rules),
        ),
    )


FAMILY = Family(
    name="counters",
    title="Counter witness",
    about="Whether the engine's own pool counters (tree evictable and protected counts, free counts) agree "
    "with the probe's census of the ids.",
    metrics=uses(
        "poolwatch_pool_counter_drift_slots",
        "poolwatch_pool_conservation_gap_slots",
        "poolwatch_pool_slots",
        "poolwatch_idle_check_strict",
        "poolwatch_worker_info",
    ),
    alerts=alerts,
    sampled=CounterDrift,
    charts=(
        Chart(
            "Counter drift per rank",
            (Line("poolwatch_pool_counter_drift_slots", "$ranks {{pool}} {{counter}}", per_pool=False),),
            "slots",
            "An engine counter minus the probe's census of the same quantity from the ids (SGLang's tree "
            "evictable/protected, vLLM's free count): the census is right, the pool's figures are its "
            f"({COUNTER_DRIFT}).",
        ),
    ),
)

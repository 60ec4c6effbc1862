"""PromQL and template fragments of the generated rules (used by the detector families,
:mod:`poolwatch.detect.families`).

Thresholds come from a :class:`~poolwatch.detect.config.DetectorConfig` (the fragments that
depend on one are functions of it), so the sidecar's detector and Prometheus agree.  Which
tripwire kinds prove a double free or a leak comes from the model
(:data:`~poolwatch.model.findings.LEAK_KINDS`), as the detector reads them.  A rule tells engines
apart by the ``engine`` label of the rank's ``poolwatch_worker_info`` (:func:`on_engines`,
:func:`unless_engines`, :func:`apart`), joined on the rank's identity in Prometheus
(:func:`rank_on`); the engines are the registry's (:mod:`poolwatch.engines`), never named here.
Only catalogued ``poolwatch_*`` metrics may appear (a test checks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from poolwatch.detect.config import DetectorConfig
from poolwatch.engines import EngineEntry
from poolwatch.model.findings import LEAK_KINDS, TIMING_KINDS, TripwireKind

__all__ = [
    "SCRAPE_LABELS",
    "as_sidecar_labels",
    "CRASH_KINDS",
    "DEFICIT",
    "DOUBLE_FREE",
    "HOST_DEFICIT",
    "HOST_SURPLUS",
    "RANK",
    "WHERE",
    "apart",
    "duration",
    "incidents_logged",
    "large",
    "not_strict",
    "on_engines",
    "rank_on",
    "unless_engines",
    "with_selector",
]

RANK = "worker, role, dp_rank, tp_rank, pp_rank"
WHERE = (
    "{{ $labels.worker }} ({{ $labels.role }}, dp {{ $labels.dp_rank }} tp {{ $labels.tp_rank }} "
    "pp {{ $labels.pp_rank }})"
)
# the tripwires that prove slots counted twice (PoolwatchDoubleFree) and lost (PoolwatchSlotLeak),
# as the detector sorts them (poolwatch.model.findings.LEAK_KINDS); two kinds may name the same ids
# (a block below zero is also below its owners), so the value is the largest kind's, as the detector's
SURPLUS_KINDS = "|".join(k.value for k in TripwireKind if k not in LEAK_KINDS | TIMING_KINDS)
LOST_KINDS = "|".join(k.value for k in TripwireKind if k in LEAK_KINDS)
CRASH_KINDS = "scheduler_exception|busy_check_failed|tree_sanity_failed"
_METRIC = re.compile(r"(?<![\w:])(poolwatch_[a-z0-9_]+)(?:\{([^}]*)\})?")


def duration(seconds: float) -> str:
    """A PromQL duration equal to ``seconds`` (whole hours or minutes when it is one)."""
    whole = round(seconds * 1000)
    for unit, ms in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if whole % ms == 0:
            return f"{whole // ms}{unit}"
    raise AssertionError("unreachable: every integer is a whole number of milliseconds")


# Labels that say how Prometheus scraped a sidecar, not what is wrong.  The rules drop them, so a
# rule's alert carries exactly the labels of the sidecar's own copy (namespace and pod stay: the
# sidecar sets them too) and Alertmanager merges the two paths' copies into one alert.
SCRAPE_LABELS = ("container", "endpoint", "instance", "job", "service")


def as_sidecar_labels(expr: str) -> str:
    """``expr`` without :data:`SCRAPE_LABELS` (its value unchanged: one series per alert)."""
    body = "\n".join("  " + line for line in expr.splitlines())
    return f"max without ({', '.join(SCRAPE_LABELS)}) (\n{body}\n)"


def with_selector(expr: str, matchers: str) -> str:
    """``expr`` with ``matchers`` (e.g. ``job="poolwatch"``) added to every ``poolwatch_*`` selector."""
    if not matchers:
        return expr

    def add(m: re.Match[str]) -> str:
        inner = f"{matchers}, {m.group(2)}" if m.group(2) else matchers
        return f"{m.group(1)}{{{inner}}}"

    return _METRIC.sub(add, expr)


# the value is the number of slots counted twice, whichever branch proves it.  The HiCache host
# pool has its own alert (PoolwatchHostPoolGap): SGLang checks no host conservation, so a host gap
# never crashes the server, and its consequences differ.
DOUBLE_FREE = (
    '(-poolwatch_pool_conservation_gap_slots{pool!="host"} > 0)\n'
    'or (-poolwatch_pool_used_slots{pool!="host"} > 0)\n'
    f'or (max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{SURPLUS_KINDS}"}}) > 0)'
)
DEFICIT = (
    '(poolwatch_pool_conservation_gap_slots{pool!="host"} > 0'
    f' or max without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{LOST_KINDS}"}}) > 0)'
)


HOST_SURPLUS = '-poolwatch_pool_conservation_gap_slots{pool="host"} > 0'
HOST_DEFICIT = 'poolwatch_pool_conservation_gap_slots{pool="host"} > 0'


def rank_on(cluster_label: str = "") -> str:
    """``on (...)`` the labels that make one rank in Prometheus: the cluster's (when one is
    configured), the pod's (two namespaces may each run a ``prefill-0``) and the rank's."""
    labels = (cluster_label, "namespace", "pod", RANK)
    return f"on ({', '.join(label for label in labels if label)})"


def not_strict(cluster_label: str = "") -> str:
    """Ranks whose idle check only warns; an absent poolwatch_idle_check_strict means unknown,
    which is the engine's default: strict (:func:`unless_engines` sets apart the engines with no
    idle check at all)."""
    return f"{rank_on(cluster_label)} poolwatch_idle_check_strict == 0"


def _info(engines: Iterable[EngineEntry]) -> str:
    names = "|".join(e.name for e in engines)
    return f'poolwatch_worker_info{{engine=~"{names}"}}'


def on_engines(engines: Iterable[EngineEntry], cluster_label: str = "") -> str:
    """``and ...``: only the ranks that run one of ``engines``."""
    return f"and {rank_on(cluster_label)} {_info(engines)}"


def unless_engines(engines: Iterable[EngineEntry], cluster_label: str = "") -> str:
    """``unless ...``: every rank but those known to run one of ``engines`` (a rank whose engine is
    not known yet stays: "" when ``engines`` is empty)."""
    engines = tuple(engines)
    return f"unless {rank_on(cluster_label)} {_info(engines)}" if engines else ""


def apart(expr: str, engines: Iterable[EngineEntry], cluster_label: str = "") -> str:
    """``expr`` for every rank but those known to run one of ``engines`` (:func:`unless_engines`)."""
    unless = unless_engines(engines, cluster_label)
    if not unless:
        return expr
    block = "\n".join("  " + line for line in expr.splitlines())
    return f"(\n{block}\n)\n{unless}"


def large(cfg: DetectorConfig) -> str:
    """A deficit this large is critical whatever the idle check does."""
    return f"{cfg.large_leak_fraction:g} * poolwatch_pool_capacity_slots"


def incidents_logged(kinds: str, cfg: DetectorConfig) -> str:
    """Incidents logged within the detector's incident hold and not ended by a restart.  A kind's
    counter series only appears with its first incident, which ``increase()`` cannot see; the
    second branch catches a non-zero series that did not exist a window ago.  A rank that began a
    new boot after its latest incident of these kinds is over it (the detector resolves its copy at
    the same restart); one never seen to restart has no restart timestamp and keeps the hold."""
    window = duration(cfg.incident_hold)
    sel = f'poolwatch_incidents_total{{kind=~"{kinds}"}}'
    last = f'max without (kind) (poolwatch_incident_last_timestamp_seconds{{kind=~"{kinds}"}})'
    return (
        f"(\n  (sum without (kind) (increase({sel}[{window}])) > 0)\n"
        f"  or\n  (sum without (kind) ({sel} > 0 unless {sel} offset {window}))\n)\n"
        f"unless (poolwatch_rank_restart_timestamp_seconds > {last})"
    )

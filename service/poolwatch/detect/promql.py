"""PromQL and template fragments of the generated rules (used by :mod:`poolwatch.detect.rules`).

Thresholds come from :class:`~poolwatch.detect.config.DetectorConfig`'s defaults, so the sidecar's
detector and Prometheus agree.  Only catalogued ``poolwatch_*`` metrics may appear (a test checks).
"""

from __future__ import annotations

from poolwatch.detect.config import DetectorConfig

__all__ = [
    "CRASH_LOGGED",
    "DEFAULTS",
    "DEFICIT",
    "DOUBLE_FREE",
    "KEEP_FIRING",
    "LARGE",
    "LEAK_LOGGED",
    "NOT_STRICT",
    "RANK",
    "WHERE",
    "WINDOW",
    "minutes",
]

DEFAULTS = DetectorConfig()
RANK = "worker, role, dp_rank, tp_rank, pp_rank"
WHERE = (
    "{{ $labels.worker }} ({{ $labels.role }}, dp {{ $labels.dp_rank }} tp {{ $labels.tp_rank }} "
    "pp {{ $labels.pp_rank }})"
)
SURPLUS_KINDS = "free_duplicate|free_and_live|free_and_tree|over_size|out_of_range"
CRASH_KINDS = "scheduler_exception|busy_check_failed|tree_sanity_failed"


def minutes(seconds: float) -> str:
    """A PromQL duration in whole minutes."""
    return f"{int(seconds // 60)}m"


# the value is the number of slots counted twice, whichever branch proves it
DOUBLE_FREE = (
    "(-poolwatch_pool_conservation_gap_slots > 0)\n"
    "or (-poolwatch_pool_used_slots > 0)\n"
    f'or (sum without (kind) (poolwatch_pool_tripwire_slots{{kind=~"{SURPLUS_KINDS}"}}) > 0)'
)
DEFICIT = (
    "(poolwatch_pool_conservation_gap_slots > 0"
    ' or sum without (kind) (poolwatch_pool_tripwire_slots{kind="missing"}) > 0)'
)
# an absent poolwatch_idle_check_strict means unknown, which is SGLang's default: strict
NOT_STRICT = f"on ({RANK}) poolwatch_idle_check_strict == 0"
LARGE = f"{DEFAULTS.large_leak_fraction:g} * poolwatch_pool_capacity_slots"
WINDOW = minutes(DEFAULTS.incident_hold)
# Prometheus's counterpart of the detector's resolve hold: a condition that flickers between two
# evaluations keeps its alert firing instead of resolving and paging again
KEEP_FIRING = "1m"


def _incidents(kinds: str) -> str:
    """Incidents logged within the window.  A kind's counter series only appears with its first
    incident, which ``increase()`` cannot see; the second branch catches a non-zero series that
    did not exist a window ago."""
    sel = f'poolwatch_incidents_total{{kind=~"{kinds}"}}'
    return (
        f"(sum without (kind) (increase({sel}[{WINDOW}])) > 0)\n"
        f"or\n(sum without (kind) ({sel} > 0 unless {sel} offset {WINDOW}))"
    )


LEAK_LOGGED = _incidents("leak_detected")
CRASH_LOGGED = _incidents(CRASH_KINDS)

"""Every alert poolwatch raises, as data: the one source for the detector, the Prometheus rules,
the runbooks and the docs (monitoring-mixins style).

:func:`alert_definitions` lists every alert with its rules' thresholds and waits taken from a
config; the alerts poolwatch judges itself are written here, the meta-alerts (Prometheus watching
poolwatch) in :mod:`poolwatch.detect.meta_alerts`.  What an alert definition is made of (names,
severities, scopes, modes, :class:`PromRule`, :class:`AlertDef`) lives in
:mod:`poolwatch.detect.schema` (import it from there).  The sidecar's detector
(:mod:`poolwatch.detect.detector`) and the generated Prometheus rules
(:mod:`poolwatch.artifacts.rules`) raise the same names with the same labels.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.meta_alerts import meta_alerts
from poolwatch.detect.probe_directory import probe_directory_alerts
from poolwatch.detect.schema import AlertDef, AlertName, Mode, PromRule, Scope, Severity

__all__ = ["ALERTS", "alert_definitions", "by_name"]


def alert_definitions(config: MixinConfig | None = None) -> tuple[AlertDef, ...]:
    """Every alert, its rules' thresholds and waits taken from ``config`` (default: the defaults)."""
    config = config or MixinConfig()
    d = config.detector
    not_strict, large = q.not_strict(config.cluster_label), q.large(d)
    leak_logged, window = q.incidents_logged("leak_detected", d), q.duration(d.incident_hold)
    keep = q.duration(d.resolve_hold)  # the detector's resolve hold: both paths resolve together
    return (
        AlertDef(
            AlertName.DOUBLE_FREE,
            Scope.POOL,
            Mode.SAMPLED,
            "A memory-pool slot was freed twice; two requests can share it and corrupt each other's output.",
            "Surplus: more slots are accounted free/cached than the pool has, or the probe saw a slot in a "
            "free list twice or while still owned. Fires at once.",
            (
                PromRule(
                    Severity.CRITICAL,
                    q.DOUBLE_FREE,
                    "0s",
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are "
                    "counted twice (a double free). Drain and restart the worker.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.SLOT_LEAK,
            Scope.POOL,
            Mode.SAMPLED,
            "Memory-pool slots are lost: nobody owns them any more.",
            "Deficit: the pool has fewer slots accounted than its size, for several samples in a row. "
            "Critical when SGLang's strict idle check will crash the server, or the leak is large.",
            (
                PromRule(
                    Severity.CRITICAL,
                    f"({q.DEFICIT}\n  unless {not_strict})\nor ({q.DEFICIT} >= {large})",
                    q.duration(d.coarse_hold),
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost. "
                    "Unless SGLang's idle check is relaxed, the server crashes at its next idle moment.",
                    keep_firing_for=keep,
                ),
                PromRule(
                    Severity.WARNING,
                    f"({q.DEFICIT}\n  and {not_strict})\nunless ({q.DEFICIT} >= {large})",
                    q.duration(d.coarse_hold),
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost; "
                    "SGLang's idle check only warns here, so capacity shrinks until a restart.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.POOL_EXHAUSTION_FORECAST,
            Scope.POOL,
            Mode.SAMPLED,
            "A leaking memory pool will run out of free slots within hours.",
            f"The fitted leak rate exhausts the pool's free and evictable slots within "
            f"{d.exhaustion_horizon / 3600:g} h.",
            (
                PromRule(
                    Severity.WARNING,
                    f"poolwatch_pool_exhaustion_eta_seconds < {d.exhaustion_horizon:g}",
                    f"{q.duration(d.forecast_for)}",
                    f"At the current leak rate the {{{{ $labels.pool }}}} pool on {q.WHERE} runs out of free "
                    "slots in {{ $value | humanizeDuration }}.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.IDLE_CHECK_FAILED,
            Scope.RANK,
            Mode.EVENT,
            "SGLang's own idle memory check reported a pool imbalance.",
            "The worker logged SGLang's leak message (its idle check). With the strict check (the default) "
            "the server dies with it.",
            (
                PromRule(
                    Severity.CRITICAL,
                    f"({leak_logged})\nunless {not_strict}",
                    "0s",
                    f"SGLang on {q.WHERE} logged a memory leak check failure in the last {window}; "
                    "with the strict idle check the server has crashed.",
                ),
                PromRule(
                    Severity.WARNING,
                    f"({leak_logged})\nand {not_strict}",
                    "0s",
                    f"SGLang on {q.WHERE} logged a memory leak warning in the last {window} "
                    "(its idle check only warns here).",
                ),
            ),
        ),
        AlertDef(
            AlertName.SCHEDULER_CRASHED,
            Scope.RANK,
            Mode.EVENT,
            "An engine's scheduler process died; the server went down with it.",
            "The worker's log shows its scheduler died: SGLang's 'Scheduler hit an exception', vLLM's "
            "'EngineCore encountered a fatal error', or a failed self-check assertion.",
            (
                PromRule(
                    Severity.CRITICAL,
                    q.incidents_logged(q.CRASH_KINDS, d),
                    "0s",
                    f"A scheduler of {q.WHERE} died in the last {window} (an exception in the scheduler "
                    "process, or a failed memory/tree self-check).",
                ),
            ),
        ),
        AlertDef(
            AlertName.SNAPSHOT_STALE,
            Scope.RANK,
            Mode.TIMED,
            "poolwatch has no current figures for a scheduler rank.",
            "The rank's latest snapshot is older than the staleness limit; its pools are not being watched.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_snapshot_stale == 1",
                    f"{q.duration(d.stale_for)}",
                    f"The latest snapshot of {q.WHERE} is stale; its memory pools are not being watched.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.TARGET_DOWN,
            Scope.TARGET,
            Mode.TIMED,
            "poolwatch cannot scrape one of its targets.",
            "Every scrape of the target (probe endpoint, SGLang /metrics, log) has failed for a while.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_target_up == 0",
                    f"{q.duration(d.target_down_for)}",
                    "poolwatch cannot scrape {{ $labels.source }} target {{ $labels.target }}.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.PROBE_DEGRADED,
            Scope.RANK,
            Mode.SAMPLED,
            "The in-process probe is disabled or containing errors.",
            "The probe's kill switch is engaged (warning), or it contained exceptions recently (info).",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_probe_disabled == 1",
                    q.duration(d.probe_disabled_for),
                    f"The poolwatch probe in {q.WHERE} is disabled: its pools are watched only coarsely.",
                    keep_firing_for=keep,
                ),
                PromRule(
                    Severity.INFO,
                    f"increase(poolwatch_probe_errors_total[{q.duration(d.probe_error_window)}]) > 0",
                    "0s",
                    f"The poolwatch probe in {q.WHERE} contained {{{{ $value | humanize }}}} error(s) "
                    "recently.",
                ),
            ),
        ),
        AlertDef(
            AlertName.PROBE_REPAIRED,
            Scope.POOL,
            Mode.SAMPLED,
            "The probe's guard repaired a free list or refused a wrong free; the engine kept serving.",
            "Guard mode (opt-in) quarantined a free-listed slot that was in use, removed a duplicate "
            "free-list entry, gave back a slot lost at idle, or refused a wrong free before it ran (an "
            "SGLang Mamba slot still owned, a vLLM block already free or still listed). Fires at once, "
            "until the worker restarts.",
            (
                PromRule(
                    Severity.WARNING,
                    "sum without (kind) (poolwatch_probe_repairs_total) > 0",
                    "0s",
                    f"The poolwatch guard on {q.WHERE} repaired {{{{ $value }}}} slot(s) of the "
                    "{{ $labels.pool }} pool. The engine kept serving; restart the worker at a quiet moment.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.HOST_POOL_GAP,
            Scope.POOL,
            Mode.SAMPLED,
            "HiCache's host-memory KV pool does not balance: host slots are lost or counted twice.",
            "The host pool's free slots, the prefix tree's host copies and the cache controller's "
            "in-flight operations do not add up to its size. Surplus (a host slot freed while a node "
            "keeps it): critical at once. Deficit (host slots in no set): warning, after a hold. "
            "SGLang checks no host conservation, so neither crashes the server.",
            (
                PromRule(
                    Severity.CRITICAL,
                    q.HOST_SURPLUS,
                    "0s",
                    f"{{{{ $value }}}} HiCache host slot(s) on {q.WHERE} are counted twice (free and on a "
                    "tree node): a later backup can overwrite a cached prefix that is then loaded back "
                    "into another request. Drain and restart the worker.",
                    keep_firing_for=keep,
                ),
                PromRule(
                    Severity.WARNING,
                    q.HOST_DEFICIT,
                    q.duration(d.coarse_hold),
                    f"{{{{ $value }}}} HiCache host slot(s) on {q.WHERE} are lost (in no free list, tree "
                    "node or operation): the host cache shrinks until a restart.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        *probe_directory_alerts(),  # judged by the sidecar too (detect/probe_directory.py)
        *meta_alerts(),
    )


ALERTS: tuple[AlertDef, ...] = alert_definitions()


def by_name(name: str) -> AlertDef:
    for alert in ALERTS:
        if alert.name == name:
            return alert
    raise KeyError(f"no alert named {name!r}")

"""The meta family: Prometheus watching poolwatch itself, for what a sidecar cannot say about itself.

A sidecar that is down, is scraped by no one, cannot deliver its pages, has a crash-looping task,
or answers under another pod's name is judged
by Prometheus alone (:attr:`~poolwatch.detect.schema.Mode.PROMETHEUS`): the family has no judge, the
detector never raises these; they exist as generated rules, runbooks and docs rows.  Besides the
catalogue's metrics its rules read Prometheus' own ``up``.
"""

from __future__ import annotations

from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, uses
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity

__all__ = [
    "FAMILY",
    "NOTIFICATIONS_FAILING",
    "NOT_SCRAPED",
    "SIDECAR_DOWN",
    "SIDECAR_IDENTITY_CROSSED",
    "TASK_CRASH_LOOPING",
]

SIDECAR_DOWN = "PoolwatchSidecarDown"
NOT_SCRAPED = "PoolwatchNotScraped"
NOTIFICATIONS_FAILING = "PoolwatchNotificationsFailing"
TASK_CRASH_LOOPING = "PoolwatchTaskCrashLooping"
SIDECAR_IDENTITY_CROSSED = "PoolwatchSidecarIdentityCrossed"


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    """Prometheus watching poolwatch: what the sidecar cannot say about itself (no threshold of
    ``config`` applies)."""
    del config
    where = "{{ $labels.namespace }}/{{ $labels.pod }}"
    delivery = 'increase(poolwatch_notifications_total{outcome=~"failed|dropped"}[5m])'
    sent = 'increase(poolwatch_notifications_total{outcome="sent"}[5m])'
    return (
        AlertDef(
            SIDECAR_DOWN,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "Prometheus cannot scrape a poolwatch sidecar: its SGLang server's memory pools are not watched.",
            "Prometheus' scrape of a sidecar (`up`) has failed for 1 minute (the sidecar cannot say so).",
            (
                PromRule(
                    Severity.WARNING,
                    'up{container="poolwatch"} == 0',
                    "1m",
                    f"Prometheus cannot scrape the poolwatch sidecar of {where}: the memory pools of its "
                    "SGLang server are not watched, and its own pages may not be sent.",
                ),
            ),
        ),
        AlertDef(
            NOT_SCRAPED,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "Prometheus scrapes no poolwatch sidecar at all: nothing is watched, and nothing else says so.",
            "The rules are loaded but no `up` series of a poolwatch container exists for 10 minutes (the "
            "PodMonitor selects nothing, or every sidecar is gone): every other poolwatch alert is silent.",
            (
                PromRule(
                    Severity.WARNING,
                    'absent(up{container="poolwatch"})',
                    "10m",
                    "Prometheus has scraped no poolwatch sidecar "
                    '(no up{container="poolwatch"} series) for 10 '
                    "minutes: no SGLang memory pool is watched, and no other poolwatch alert can fire.",
                ),
            ),
        ),
        AlertDef(
            NOTIFICATIONS_FAILING,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "A poolwatch sidecar cannot deliver its alerts: its fast pages do not arrive.",
            "Deliveries to a receiver (Alertmanager, a webhook) failed or were dropped for 5 minutes "
            "with none getting through; only the slower Prometheus path pages meanwhile.",
            (
                PromRule(
                    Severity.WARNING,
                    f"(sum without (outcome) ({delivery}) > 0)\n"
                    f"unless on (namespace, pod, receiver) (sum without (outcome) ({sent}) > 0)",
                    "5m",
                    f"The poolwatch sidecar of {where} failed or dropped {{{{ $value | humanize }}}} "
                    "deliveries to {{ $labels.receiver }} in the last 5m and delivered none: its direct "
                    "pages do not arrive, only the slower Prometheus path's.",
                ),
            ),
        ),
        AlertDef(
            TASK_CRASH_LOOPING,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "A poolwatch sidecar task keeps crashing: part of its watching or paging has stopped.",
            "A background task of a sidecar (scrape loop, evaluation timer, a deliverer) crashed 3 times "
            "within 5 minutes; it is restarted with backoff, and its first error is in the log.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_task_crash_looping == 1",
                    "2m",
                    f"The {{{{ $labels.task }}}} task of the poolwatch sidecar of {where} keeps crashing "
                    "(3 times within 5 minutes); it is restarted with backoff, but what it does is not "
                    "being done meanwhile.",
                ),
            ),
        ),
        AlertDef(
            SIDECAR_IDENTITY_CROSSED,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "Prometheus reads one pod's sidecar under another pod's name: its rule alerts would name a "
            "worker of one pod with another pod.",
            "The pod a sidecar says it serves (poolwatch_sidecar_info{sidecar_pod}) is not the pod "
            "Prometheus scraped it as: two pods answer at one address (host networking, a port taken "
            "twice). While it fires, the rule copies of that pod's alerts are silenced (Alertmanager's "
            "inhibit rule); the sidecars' own copies name their pods themselves.",
            (
                PromRule(
                    Severity.WARNING,
                    'poolwatch_sidecar_info{sidecar_pod!=""}\n'
                    "unless on (namespace, pod, sidecar_pod)\n"
                    '  label_replace(poolwatch_sidecar_info, "sidecar_pod", "$1", "pod", "(.+)")',
                    "0s",
                    "Prometheus scrapes the poolwatch sidecar of pod {{ $labels.sidecar_pod }} as "
                    f"{where}: two pods answer at one address (host networking, a port taken twice). The "
                    f"rule copies of {where}'s alerts are silenced meanwhile; the sidecars' own alerts name "
                    "their pods.",
                ),
            ),
        ),
    )


FAMILY = Family(
    name="meta",
    title="The sidecar itself",
    about="Prometheus watching poolwatch: a sidecar down, scraped by no one, not delivering, crash-looping, "
    "or answering under another pod's name.",
    metrics=uses(
        "poolwatch_notifications_total",
        "poolwatch_task_crash_looping",
        "poolwatch_sidecar_info",
    ),
    alerts=alerts,
)

"""The one description of poolwatch's Alertmanager routing: the route subtree, the inhibit rules and
each receiver's integrations, in plain field names (the plain file and the AlertmanagerConfig
object are translations of it: :mod:`.plain`, :mod:`.crd`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolwatch.artifacts import notification_text as nt
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.schema import ALERT_NAME_PATTERN
from poolwatch.notify.paths import DIRECT, PATH_LABEL, RULES

CONFIG_PATH = "deploy/alertmanager/alertmanager.yaml"
OBJECT_PATH = "deploy/kubernetes/examples/pd/alertmanagerconfig.yaml"
# the same object in every example that deploys to a stack of its own (the stack routes what nothing
# routes to `null`: without it, no poolwatch alert would reach a receiver)
OBJECT_PATHS = (OBJECT_PATH, "deploy/kubernetes/examples/vllm/alertmanagerconfig.yaml")
SECRET = "poolwatch-receivers"  # the Secret the AlertmanagerConfig reads its receivers' keys from
BRIDGE = "http://incident-bridge.monitoring.svc:8080"
PAGE, TICKET, NULL = "poolwatch-page", "poolwatch-ticket", "null"
RANK = ("worker", "role", "dp_rank", "tp_rank", "pp_rank")
# a critical group's group_interval: an update (an alert gained its slot ids or cause, notify/alertmanager.py)
# or a TP peer's late copy leaves Alertmanager within this of reaching it
UPDATE_WITHIN = "10s"


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: str  # = != =~ !~
    value: str

    def plain(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'

    def crd(self) -> dict[str, str]:
        """The AlertmanagerConfig form.  An equality matcher leaves ``matchType`` out (the operator's
        default is ``=``): kustomize writes a bare ``=``, which YAML 1.1 readers (PyYAML) take for
        the ``value`` tag and refuse."""
        if self.op == "=":
            return {"name": self.name, "value": self.value}
        return {"name": self.name, "matchType": self.op, "value": self.value}


POOLWATCH = Matcher("alertname", "=~", ALERT_NAME_PATTERN)


def _with_cluster(labels: tuple[str, ...], config: MixinConfig) -> list[str]:
    return [config.cluster_label, *labels] if config.cluster_label else list(labels)


def route(config: MixinConfig) -> dict[str, Any]:
    """The poolwatch subtree (plain field names; matchers as :class:`Matcher`)."""
    return {
        "matchers": [POOLWATCH],
        "group_by": _with_cluster(("alertname", "namespace", "worker", "pool"), config),
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
        "routes": [
            {
                "matchers": [Matcher("severity", "=", "critical")],
                "receiver": PAGE,
                # at once: the rank may crash at its next idle moment, under a second after the
                # fault at light load.  Alertmanager 0.25 flushes a new group with a 0s wait as soon
                # as its first alert arrives, so an incident's alerts must arrive in one POST: the
                # sidecar gathers a worker's TP ranks for 0.2 s (notify/delivery.py, docs/alerting.md)
                "group_wait": "0s",
                "group_interval": UPDATE_WITHIN,
                "repeat_interval": "1h",
            },
            {"matchers": [Matcher("severity", "=", "warning")], "receiver": TICKET},
            {"matchers": [Matcher("severity", "=", "info")], "receiver": NULL},
        ],
    }


def inhibit_rules(config: MixinConfig) -> list[dict[str, Any]]:
    """(source matchers, target matchers, equal labels) as plain-field dicts."""
    same = ("alertname", "severity", "namespace", "pod", *RANK, "pool", "target", "source")
    return [
        {  # the sidecar's exact copy silences the rule copy of the same alert (notify/paths.py)
            "source": [POOLWATCH, Matcher(PATH_LABEL, "=", DIRECT)],
            "target": [POOLWATCH, Matcher(PATH_LABEL, "=", RULES)],
            "equal": _with_cluster(same, config),
        },
        {  # a crashed scheduler explains its worker's stale snapshots, down targets and probe alerts
            "source": [Matcher("alertname", "=", "PoolwatchSchedulerCrashed")],
            "target": [
                Matcher(
                    "alertname", "=~", "PoolwatchSnapshotStale|PoolwatchTargetDown|PoolwatchProbeDegraded"
                )
            ],
            "equal": _with_cluster(("namespace", "worker"), config),
        },
        {  # one pod's sidecar read as another's: that pod's rule copies would name a foreign worker
            "source": [Matcher("alertname", "=", "PoolwatchSidecarIdentityCrossed")],
            "target": [POOLWATCH, Matcher(PATH_LABEL, "=", RULES)],
            "equal": _with_cluster(("namespace", "pod"), config),
        },
        {  # the critical form of an alert silences its warning form for the same pool
            "source": [POOLWATCH, Matcher("severity", "=", "critical")],
            "target": [POOLWATCH, Matcher("severity", "=", "warning")],
            "equal": _with_cluster(("alertname", "namespace", *RANK, "pool"), config),
        },
    ]


def integrations(receiver: str, config: MixinConfig) -> dict[str, list[dict[str, Any]]]:
    """A receiver's integrations (plain field names; secrets as ``("secret", key)``)."""
    cl = config.cluster_label
    hook = {"url": f"{BRIDGE}/{receiver.removeprefix('poolwatch-')}", "send_resolved": True}
    slack = {
        "api_url": ("secret", "slack-webhook-url"),
        "send_resolved": True,
        "title": nt.slack_title(),
        "text": nt.slack_text(cl),
        "color": '{{ if eq .Status "firing" }}danger{{ else }}good{{ end }}',
    }
    out: dict[str, list[dict[str, Any]]] = {"webhook": [hook], "slack": [slack]}
    if receiver == PAGE:
        pd = nt.pagerduty(cl)
        out["pagerduty"] = [
            {
                "routing_key": ("secret", "pagerduty-routing-key"),
                "url": "https://events.pagerduty.com/v2/enqueue",
                "send_resolved": True,
                "description": pd["description"],
                "severity": pd["severity"],
                "client": pd["client"],
                "client_url": pd["client_url"],
                "links": [
                    {"href": pd["client_url"], "text": "Dashboard"},
                    {"href": pd["runbook"], "text": "Runbook"},
                ],
                "details": {
                    key: pd[key]
                    for key in ("alerts", "runbook", "firing", "resolved", "num_firing", "num_resolved")
                },
            }
        ]
    else:
        out["email"] = [
            {
                "to": "llm-serving-oncall@example.com",
                "from": "poolwatch@example.com",
                "smarthost": "smtp.example.com:587",
                "require_tls": True,
                "send_resolved": True,
                "headers": {"Subject": nt.email_subject()},
                "html": nt.email_html(cl),
                "text": nt.text(cl),
            }
        ]
    return out

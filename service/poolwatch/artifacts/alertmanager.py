"""The shipped Alertmanager routing, generated twice from one description so the two cannot drift:
the plain configuration (``deploy/alertmanager/alertmanager.yaml``, checked by ``amtool``) and the
namespaced ``AlertmanagerConfig`` of the PD example (prometheus-operator).

* **Routes**: critical poolwatch alerts leave Alertmanager as soon as they arrive (``group_wait:
  0s``: a double free corrupts outputs now and the rank dies at its next idle moment; the sidecar
  posts an incident's alerts in one request), and their updates (the slot ids or cause learned
  later: a new ``poolwatch_detail``) within ``group_interval`` (:data:`UPDATE_WITHIN`); warnings
  are batched.
* **Inhibit rules**: the sidecar's copy of an alert silences Prometheus' rule copy of the same alert
  (:mod:`poolwatch.notify.paths`: one incident, one notification, the sidecar's text); a crashed
  scheduler silences its worker's stale/target/probe alerts; critical silences warning.
* **Receivers**: the incident-bridge webhook plus Slack, PagerDuty Events v2 and email, each with
  the templates of :mod:`poolwatch.artifacts.notification_text`.  Delete the integrations you do
  not use; secrets are placeholders in the plain file and Secret references in the object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from poolwatch.artifacts import notification_text as nt
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.schema import ALERT_NAME_PATTERN
from poolwatch.notify.paths import DIRECT, PATH_LABEL, RULES

__all__ = ["CONFIG_PATH", "OBJECT_PATH", "Matcher", "artifacts", "inhibit_rules", "plain_config", "route"]

CONFIG_PATH = "deploy/alertmanager/alertmanager.yaml"
OBJECT_PATH = "deploy/kubernetes/examples/pd/alertmanagerconfig.yaml"
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


def _integrations(receiver: str, config: MixinConfig) -> dict[str, list[dict[str, Any]]]:
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
                "details": {"alerts": pd["alerts"], "runbook": pd["runbook"]},
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


_PLACEHOLDER = {
    "slack-webhook-url": "https://hooks.slack.com/services/REPLACE/WITH/YOURS",
    "pagerduty-routing-key": "REPLACE_WITH_YOUR_EVENTS_V2_ROUTING_KEY",
}


def _plain_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return _PLACEHOLDER[value[1]]
    return value


def _plain_receiver(name: str, config: MixinConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    for kind, items in _integrations(name, config).items():
        out[f"{kind}_configs"] = [{k: _plain_value(v) for k, v in item.items()} for item in items]
    return out


def _plain_route(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k not in ("matchers", "routes")}
    out = {"matchers": [m.plain() for m in r["matchers"]], **out}
    if "routes" in r:
        out["routes"] = [_plain_route(c) for c in r["routes"]]
    return out


def plain_config(config: MixinConfig) -> dict[str, Any]:
    rules = [
        {
            "source_matchers": [m.plain() for m in rule["source"]],
            "target_matchers": [m.plain() for m in rule["target"]],
            "equal": rule["equal"],
        }
        for rule in inhibit_rules(config)
    ]
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "default",
            "group_by": ["alertname", "namespace"],
            "routes": [_plain_route(route(config))],
        },
        "inhibit_rules": rules,
        "receivers": [
            {"name": "default"},
            {"name": NULL},
            _plain_receiver(PAGE, config),
            _plain_receiver(TICKET, config),
        ],
    }


_CRD_KEYS = {
    "group_by": "groupBy",
    "group_wait": "groupWait",
    "group_interval": "groupInterval",
    "repeat_interval": "repeatInterval",
    "send_resolved": "sendResolved",
    "api_url": "apiURL",
    "routing_key": "routingKey",
    "client_url": "clientURL",
    "require_tls": "requireTLS",
}


def _crd_value(key: str, value: Any) -> Any:
    if isinstance(value, tuple):
        return {"name": SECRET, "key": value[1]}
    if key == "links":
        return [{"href": link["href"], "alt": link["text"]} for link in value]
    if key in ("details", "headers"):
        return [{"key": k, "value": v} for k, v in value.items()]
    return value


def _crd_integration(item: dict[str, Any]) -> dict[str, Any]:
    renamed = {"links": "pagerDutyLinkConfigs"}
    return {renamed.get(k, _CRD_KEYS.get(k, k)): _crd_value(k, v) for k, v in item.items()}


def _crd_route(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in r.items():
        if key == "matchers":
            out["matchers"] = [m.crd() for m in value]
        elif key == "routes":
            out["routes"] = [_crd_route(c) for c in value]
        else:
            out[_CRD_KEYS.get(key, key)] = value
    return out


def _crd(config: MixinConfig) -> dict[str, Any]:
    receivers: list[dict[str, Any]] = [{"name": NULL}]
    for name in (PAGE, TICKET):
        receiver: dict[str, Any] = {"name": name}
        for kind, items in _integrations(name, config).items():
            receiver[f"{kind}Configs"] = [_crd_integration(i) for i in items]
        receivers.append(receiver)
    top = route(config)
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "poolwatch", "labels": {"app.kubernetes.io/name": "poolwatch"}},
        "spec": {
            "route": {"receiver": TICKET, **_crd_route(top)},
            "inhibitRules": [
                {
                    "sourceMatch": [m.crd() for m in rule["source"]],
                    "targetMatch": [m.crd() for m in rule["target"]],
                    "equal": rule["equal"],
                }
                for rule in inhibit_rules(config)
            ],
            "receivers": receivers,
        },
    }


_PLAIN_HEADER = """\
# Generated by `poolwatch generate` (poolwatch/artifacts/alertmanager.py); do not edit.
# An Alertmanager configuration routing poolwatch's alerts (checked by `amtool check-config`).
# Merge the "poolwatch" route, the inhibit rules and the receivers into your own configuration,
# keep the integrations you use and put your URLs and keys in place of the placeholders.
# Each alert reaches Alertmanager twice, labelled poolwatch_path="sidecar" (the sidecar's exact
# copy) and poolwatch_path="rules" (Prometheus' rules): the first inhibit rule silences the rule
# copy while the sidecar's is there, so an incident notifies once, with the sidecar's text.
"""

_CRD_HEADER = """\
# Generated by `poolwatch generate` (poolwatch/artifacts/alertmanager.py); do not edit.
# The routing, inhibit rules and receivers of deploy/alertmanager/alertmanager.yaml, as a
# namespaced AlertmanagerConfig (prometheus-operator adds a namespace matcher, so it only sees
# this namespace's alerts). The Alertmanager's alertmanagerConfigSelector must select it, and the
# Secret poolwatch-receivers must hold slack-webhook-url and pagerduty-routing-key.
"""


class _Dumper(yaml.SafeDumper):
    """Keys in the order written."""


def _dump(header: str, doc: dict[str, Any]) -> str:
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


def artifacts(root: Path, config: MixinConfig) -> dict[str, str]:
    """The plain configuration and the AlertmanagerConfig object."""
    del root  # built from code alone
    return {
        CONFIG_PATH: _dump(_PLAIN_HEADER, plain_config(config)),
        OBJECT_PATH: _dump(_CRD_HEADER, _crd(config)),
    }

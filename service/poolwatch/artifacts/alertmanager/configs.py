"""The shipped Alertmanager routing, generated twice from one description so the two cannot drift:
the plain configuration (``deploy/alertmanager/alertmanager.yaml``, checked by ``amtool``) and the
namespaced ``AlertmanagerConfig`` of the PD and vLLM examples (prometheus-operator).

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

from pathlib import Path
from typing import Any

import yaml

from poolwatch.artifacts.alertmanager.crd import CRD_HEADER, crd_object
from poolwatch.artifacts.alertmanager.plain import PLAIN_HEADER, plain_config
from poolwatch.artifacts.alertmanager.routing import CONFIG_PATH, OBJECT_PATHS
from poolwatch.detect.config import MixinConfig

__all__ = ["artifacts"]


class _Dumper(yaml.SafeDumper):
    """Keys in the order written."""


def _dump(header: str, doc: dict[str, Any]) -> str:
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


def artifacts(root: Path, config: MixinConfig) -> dict[str, str]:
    """The plain configuration and the AlertmanagerConfig object."""
    del root  # built from code alone
    crd = _dump(CRD_HEADER, crd_object(config))
    return {CONFIG_PATH: _dump(PLAIN_HEADER, plain_config(config)), **dict.fromkeys(OBJECT_PATHS, crd)}

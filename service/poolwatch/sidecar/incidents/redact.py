"""What an incident bundle may say of a request, a model and the sidecar's settings.  Pure.

A bundle is written to be pasted into an upstream bug report, so it carries nothing secret or
user-identifying (docs/security.md, guarantee 18):

* **request ids** are hashed: ``req-`` and the first 12 hex digits of the id's SHA-256.  Some
  deployments put user data in request ids (a client's own ``rid``, an ``X-Request-Id`` carrying an
  account or a session), so the id itself never appears; the operator finds the request in their
  own logs by hashing their ids the same way (``printf %s "$rid" | sha256sum | cut -c1-12``), and
  within one bundle the same request has the same name.  The owners poolwatch itself writes (``tree``,
  a deferred-free queue ``deferred@<n>``) are kept as they are;
* **a model** is shown by its last component only: a path on disk (``/data/models/alice/ckpt``,
  or a relative one, ``models/alice/ckpt``) cannot be told from a hub name
  (``Qwen/Qwen3-Next-80B-A3B-Instruct``) by its text alone, so a hub name loses its organisation
  too (``Qwen3-Next-80B-A3B-Instruct``);
* **settings**: every URL as ``scheme://host:port`` (:func:`poolwatch.addresses.shown_url`: no user,
  password, path, query or token), a credential (the bearer token and password files, the basic
  auth user) as ``<set>`` or ``""``, a file or directory by its base name, the worker, pod and
  namespace names, the workers a sidecar follows (``--probe-workers``) and the extra alert labels
  left out; the rest (intervals, thresholds, limits, the
  engine, the role, the model) as configured.

Prompts, token ids and request text are never read by poolwatch at all: no snapshot carries them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from poolwatch.addresses import shown_url
from poolwatch.settings.sidecar import FAMILY_THRESHOLDS, Settings

__all__ = ["OWN_OWNERS", "model_name", "request_name", "settings_summary"]

OWN_OWNERS = re.compile(r"tree|deferred@\d{1,12}")  # owners poolwatch names itself, not requests
_URLS = {
    "alertmanager_urls",
    "webhook_urls",
    "probe_urls",
    "metrics_urls",
    "dashboard_url",
    "runbook_base_url",
}
_CREDENTIALS = {"bearer_token_file", "basic_auth_user", "basic_auth_password_file"}
_PATHS = {"probe_dir", "log_paths", "snapshot_files", "targets_file", "state_file", "ca_file"}
# who the operator is, not what poolwatch does
_LEFT_OUT = {"worker", "pod", "namespace", "probe_workers", "alert_labels"}


def request_name(rid: str) -> str:
    """``req-<12 hex>``: the SHA-256 of ``rid``, cut; poolwatch's own owner names as they are."""
    if OWN_OWNERS.fullmatch(rid):
        return rid
    return "req-" + hashlib.sha256(rid.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def model_name(model: str) -> str:
    """A model by its last component (a path, absolute or relative, or a hub name alike)."""
    return _base(model)


def _base(path: str) -> str:
    return re.split(r"[/\\]", path.rstrip("/\\"))[-1] if path else ""


def _each(value: Any, show: Any) -> Any:
    return [show(v) for v in value] if isinstance(value, tuple) else (show(value) if value else "")


def _shown(name: str, value: Any) -> Any:
    if name in _CREDENTIALS:
        return "<set>" if value else ""
    if name in _URLS:
        return _each(value, shown_url)
    if name in _PATHS:
        return _each(value, _base)
    if name == "model":
        return model_name(value)
    if isinstance(value, tuple):
        return list(value)
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


def settings_summary(settings: Settings) -> dict[str, dict[str, Any]]:
    """The sidecar's settings by group, redacted as the module docstring says."""
    groups = {group.name: getattr(settings, group.name) for group in dataclasses.fields(settings)}
    groups |= {title: settings.detection.of(kind) for title, kind in FAMILY_THRESHOLDS.items()}
    return {name: _group(values) for name, values in groups.items()}


def _group(values: Any) -> dict[str, Any]:
    return {
        f.name: _shown(f.name, getattr(values, f.name))
        for f in dataclasses.fields(values)
        if f.name not in _LEFT_OUT and f.metadata.get("setting", True)
    }

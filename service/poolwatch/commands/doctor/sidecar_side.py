"""``poolwatch doctor`` from the sidecar's side: run in the sidecar's container, with its environment
(``kubectl exec -c poolwatch <pod> -- poolwatch doctor``).

Which directory the sidecar reads (its settings, resolved as the sidecar resolves them), whether it
may trust it as the user it runs as, which ranks announced themselves there and whether they answer
from here, whether it can read the node's probe secret, whether the running sidecar follows them,
and (``--prometheus``) whether Prometheus has their series.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

import httpx

from poolwatch.commands.doctor.common import (
    announced,
    attached_check,
    directory_check,
    prometheus_check,
    sidecar_check,
)
from poolwatch.commands.doctor.report import Check, Fault, Status
from poolwatch.discovery.files import read_secret
from poolwatch.discovery.safety import default_directory
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.target_config import static_targets

__all__ = ["sidecar_checks"]

HINT = (
    "the engine's probes announce themselves in another directory (its POOLWATCH_PROBE_DIR), or none "
    "attached: run `poolwatch doctor` in the engine's container"
)


def _reads(settings: Settings, environ: Mapping[str, str]) -> tuple[str, Check | None]:
    """The directory the sidecar reads, as :class:`~poolwatch.sources.targets.TargetSet` resolves it."""
    configured = settings.targets.probe_dir
    if configured:
        return configured, None
    try:
        static = static_targets(settings)
    except ConfigError:
        static = []
    if static:
        names = ", ".join(sorted({str(t.source) for t in static}))
        return "", Check(
            "directory",
            Status.FAIL,
            f"the sidecar reads no probe directory: POOLWATCH_PROBE_DIR is empty and other targets are set "
            f"({names}), so it looks for no probe",
            "set POOLWATCH_PROBE_DIR to the engine's POOLWATCH_PROBE_DIR and mount the probe volume "
            "(read-only) in the sidecar",
            Fault.SIDECAR_NOT_READING,
        )
    return default_directory(environ), None


def sidecar_checks(
    environ: Mapping[str, str], client: httpx.Client, *, sidecar: str = "", prometheus: str = ""
) -> list[Check]:
    """Every check from the sidecar's side; ``sidecar`` defaults to this sidecar's own port on loopback."""
    try:
        settings = Settings.from_env(environ)
    except ConfigError as exc:
        return [Check("settings", Status.FAIL, f"the sidecar would not start: {exc}", "fix that setting")]
    checks = [
        Check("settings", Status.OK, f"the sidecar's settings are valid (it runs as uid {os.geteuid()})")
    ]
    path, refused = _reads(settings, environ)
    if refused is not None:
        return [*checks, refused]
    checks.append(directory_check(path, "sidecar", missing_ok=False))
    if not settings.targets.probe_dir:
        said = f"{checks[-1].says} (the default: POOLWATCH_PROBE_DIR is not set)"
        checks[-1] = replace(checks[-1], says=said)
    if checks[-1].status is Status.FAIL:
        return checks
    ranks, skipped = announced(path, client)
    checks.append(attached_check(ranks, skipped, path, HINT))
    if ranks and read_secret(path) is None:
        checks.append(
            Check(
                "directory",
                Status.WARN,
                f"the node's probe secret in {path} is not readable by uid {os.geteuid()}: the probes refuse "
                "the sidecar's long polls and final snapshots are not checked",
                "give the pod fsGroup: <the sidecar's group> (the manifests: 65532)",
            )
        )
    local = sidecar or f"http://127.0.0.1:{settings.server.port}"
    checks.append(sidecar_check(ranks, local, path, client))
    checks.append(prometheus_check([r.entry.worker for r in ranks], prometheus, client))
    return checks

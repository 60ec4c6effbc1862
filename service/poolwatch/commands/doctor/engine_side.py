"""``poolwatch doctor`` from the engine's side: run with the engine's own Python, in its environment
(``kubectl exec -c sglang <pod> -- python3 -m poolwatch.cli doctor``).

Is poolwatch installed where the engine finds it, does the probe read this release, has the engine
consented, may the engine trust the discovery directory, did its ranks announce themselves there
and do they answer; with ``--sidecar`` and ``--prometheus``, does the sidecar follow them and does
Prometheus have their series.  The engine's spec comes from the engine registry
(:func:`poolwatch.engines.load`), as the sidecar finds an engine's sources: nothing of the engine
itself is imported.
"""

from __future__ import annotations

import importlib.util
import site
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx

from poolwatch.commands.doctor.common import (
    announced,
    attached_check,
    directory_check,
    prometheus_check,
    sidecar_check,
)
from poolwatch.commands.doctor.report import Check, Fault, Status
from poolwatch.discovery.safety import default_directory
from poolwatch.engines import engine_entry, load

__all__ = ["PTH", "engine_checks", "installed_engine"]

PTH = "poolwatch-probe.pth"
_TRUE = {"1", "true", "yes", "on"}
Find = Callable[[str], object | None]


def installed_engine(names: Sequence[str], find: Find = importlib.util.find_spec) -> str:
    """The first of ``names`` whose engine is importable from this Python ("" when none is)."""
    for name in names:
        if find(load(engine_entry(name).probe).code_package) is not None:
            return name
    return ""


def _installed(spec: Any, title: str, find: Find, site_dirs: Sequence[str]) -> list[Check]:
    if find(spec.code_package) is None:
        return [
            Check(
                "installed",
                Status.FAIL,
                f"{title} is not installed in this Python ({sys.executable})",
                f"run doctor with {title}'s own Python, in its container: python3 -m poolwatch.cli doctor",
                Fault.NOT_INSTALLED,
            )
        ]
    if not list(entry_points(group=spec.plugin_group, name="poolwatch")):
        return [
            Check(
                "installed",
                Status.FAIL,
                f"poolwatch is importable but declares no {spec.plugin_group} entry point here: "
                f"{title} will not load it",
                "pip install the poolwatch wheel into this Python (not a source tree on PYTHONPATH)",
                Fault.NOT_INSTALLED,
            )
        ]
    out = [Check("installed", Status.OK, f"poolwatch with its {spec.plugin_group} entry point")]
    if spec.pth_needed_by and not any((Path(d) / PTH).is_file() for d in site_dirs):
        out.append(
            Check(
                "installed",
                Status.WARN,
                f"no {PTH} in site-packages (an editable install): {spec.pth_needed_by}",
                f"pip install the wheel (never `pip install -e`) where {title} needs the {PTH}",
                Fault.NO_PTH,
            )
        )
    return out


def _release(spec: Any, title: str, environ: Mapping[str, str]) -> Check:
    override = environ.get("POOLWATCH_ENGINE_VERSION", "") or environ.get(spec.release_env, "")
    try:
        release = spec.release(override)
    except ValueError as exc:  # the room's UnknownRelease: the probe refuses to attach
        return Check(
            "release",
            Status.FAIL,
            f"the probe refuses this {title}: {exc} (the engine's log says 'poolwatch probe not installed')",
            "run a release the probe reads (docs/engines/), or set POOLWATCH_ENGINE_VERSION to the nearest "
            "one it reads, at your own risk",
            Fault.UNREAD_RELEASE,
        )
    said = f"{title} {release.version or '(version unknown)'} read as {release.family}"
    if not release.verified:
        return Check(
            "release",
            Status.WARN,
            f"{said}: a release poolwatch never read; read after a shape check, guard off",
            "check docs/engines/ for the releases read; upgrade poolwatch when a newer one reads it",
            Fault.UNREAD_RELEASE,
        )
    return Check("release", Status.OK, said)


def _activated(spec: Any, title: str, environ: Mapping[str, str]) -> Check:
    if environ.get("POOLWATCH_PROBE_DISABLE", "").lower() in _TRUE:
        return Check(
            "activated",
            Status.FAIL,
            "POOLWATCH_PROBE_DISABLE is set: the kill switch installs nothing",
            "unset POOLWATCH_PROBE_DISABLE and restart the engine",
            Fault.DISABLED,
        )
    if not spec.consent(environ):
        return Check(
            "activated",
            Status.FAIL,
            f"no consent: {title} would load poolwatch, which then does nothing (installed is not consent)",
            f"set {spec.consent_hint} in the engine's environment and restart it",
            Fault.NO_CONSENT,
        )
    only = [n.strip() for n in environ.get(spec.plugins_env, "").split(",") if n.strip()]
    if spec.plugins_env and only and "poolwatch" not in only:
        return Check(
            "activated",
            Status.FAIL,
            f"{spec.plugins_env}={','.join(only)} restricts the plugins {title} loads; poolwatch is not "
            "among them",
            f"add poolwatch to {spec.plugins_env}",
            Fault.NO_CONSENT,
        )
    return Check("activated", Status.OK, "the engine consents (its plugin or the .pth arms the probe)")


def engine_checks(
    name: str,
    environ: Mapping[str, str],
    client: httpx.Client,
    *,
    sidecar: str = "",
    prometheus: str = "",
    find: Find = importlib.util.find_spec,
    site_dirs: Sequence[str] | None = None,
) -> list[Check]:
    """Every check from the engine's side (``find``: how an importable package is found; ``site_dirs``:
    where the ``.pth`` would be)."""
    entry = engine_entry(name)
    spec = load(entry.probe)
    dirs = site.getsitepackages() if site_dirs is None else site_dirs
    checks = _installed(spec, entry.title, find, dirs)
    checks += [_release(spec, entry.title, environ), _activated(spec, entry.title, environ)]
    path = environ.get("POOLWATCH_PROBE_DIR") or default_directory(environ)
    checks.append(directory_check(path, "engine", missing_ok=True))
    if Path(path, "DISABLE").exists():
        checks.append(
            Check("directory", Status.FAIL, f"{path}/DISABLE exists: the kill switch", f"rm {path}/DISABLE",
                  Fault.DISABLED)
        )  # fmt: skip
    ranks, skipped = announced(path, client)
    hint = (
        "start the engine: each rank logs 'poolwatch probe attached' once its scheduler is built; fix the "
        "steps above first"
    )
    checks.append(attached_check(ranks, skipped, path, hint))
    checks.append(sidecar_check(ranks, sidecar, path, client))
    checks.append(prometheus_check([r.entry.worker for r in ranks], prometheus, client))
    return checks

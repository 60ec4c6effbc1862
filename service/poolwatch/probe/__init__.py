"""The in-process probe: exact pool accounts from inside SGLang's scheduler (see ``docs/probe.md``).

Public surface::

    install(Scheduler, config)       wrap a scheduler class; every instance gets a probe
    attach(scheduler, config)        give one scheduler instance a probe -> Probe
    detach(scheduler) / uninstall(Scheduler)
    ProbeConfig.from_env(environ)    settings from POOLWATCH_PROBE_* variables
    read_discovery_dir(path)         the sidecar's reader of the discovery directory

Nothing here imports torch at import time.
"""

from __future__ import annotations

from poolwatch.discovery import DiscoveryEntry, read_discovery_dir
from poolwatch.probe.config import ProbeConfig, ProbeConfigError
from poolwatch.probe.core import Probe
from poolwatch.probe.hooks import attach, detach, install, uninstall

__all__ = [
    "DiscoveryEntry",
    "Probe",
    "ProbeConfig",
    "ProbeConfigError",
    "attach",
    "detach",
    "install",
    "read_discovery_dir",
    "uninstall",
]

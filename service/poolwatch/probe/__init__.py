"""The in-process probe: exact pool accounts from inside the engine's scheduler (``docs/probe.md``).

Where things are:

* :mod:`poolwatch.probe.core`: engine-neutral machinery (``POOLWATCH_PROBE_*`` settings, reading
  foreign objects without raising, error containment, the published snapshot, the kill switch);
* :mod:`poolwatch.probe.endpoint`: the loopback HTTP endpoint;
* :mod:`poolwatch.probe.census`: the pure ownership proofs and the census report;
* :mod:`poolwatch.probe.sglang`: everything SGLang-specific (release families, readers, hooks,
  censuses, guard mode's repairs).  Its entry points are ``install(Scheduler, config)`` /
  ``attach(scheduler, config)`` / ``detach`` / ``uninstall`` in :mod:`poolwatch.probe.sglang.hooks`.

The neutral packages never import an engine room (``pyproject.toml``'s import contracts).
Nothing here imports torch at import time.
"""

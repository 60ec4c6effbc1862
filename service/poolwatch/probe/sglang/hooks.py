"""Wrapping SGLang's scheduler at loop boundaries (reference §6.3), for a class or one instance.

========================  =========  ==========================================================
method (first that exists)  when     probe call
========================  =========  ==========================================================
``__init__``              after      :func:`attach` (the probe is born with the scheduler)
``ingest_requests`` /     before     ``on_loop_boundary``: the previous iteration is complete
``recv_requests``
``on_idle``,              before     ``on_idle``: look before SGLang's own idle check (each
``self_check_during_idle``           that exists: a release calls only its own)
``process_prefill_chunk``  after     ``after_prefill_chunk``: the #12994 tripwire
========================  =========  ==========================================================

The wrapping itself (wrappers that never raise into the scheduler, and only forward the call
without a probe) is :mod:`poolwatch.probe.core.hooks`; serving is
:class:`~poolwatch.probe.core.serving.Publisher`.  This module says which methods, and who the
worker is.
"""

from __future__ import annotations

import functools
import os

from poolwatch.model import WorkerId
from poolwatch.probe.core import hooks as core
from poolwatch.probe.core.access import Reading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.sglang.identity import local_index, worker_identity
from poolwatch.probe.sglang.requests import role_of
from poolwatch.probe.sglang.scheduler_probe import Probe

__all__ = ["HOOKS", "attach", "detach", "hook_names", "install", "probe_of", "uninstall"]

HOOKS: tuple[core.Hook, ...] = (
    (("ingest_requests", "recv_requests"), "before", "on_loop_boundary"),
    (("on_idle",), "before", "on_idle"),  # 0.5.12+
    (("self_check_during_idle",), "before", "on_idle"),  # up to 0.5.10
    (("process_prefill_chunk",), "after", "after_prefill_chunk"),
)


def hook_names(owner: object) -> dict[str, tuple[str, str]]:
    """``{method: (when, probe method)}`` for the methods ``owner`` (a class or instance) has."""
    return core.hook_names(owner, HOOKS)


def probe_of(scheduler: object) -> Probe | None:
    return core.probe_of(scheduler, Probe)


def install(cls: type, config: ProbeConfig | None = None) -> bool:
    """Wrap ``cls``'s loop-boundary methods (idempotent); every instance built afterwards gets a
    probe.  Returns False if ``cls`` was already installed."""
    return core.install(cls, HOOKS, Probe, config, attach)


def uninstall(cls: type) -> None:
    """Undo :func:`install` (tests)."""
    core.uninstall(cls)


def _identify(probe: Probe, reading: Reading) -> tuple[WorkerId, int]:
    sched = probe.scheduler
    worker = worker_identity(sched, reading, role_of(sched, reading), probe.version, probe.environ)
    return worker, local_index(sched, reading)


def attach(scheduler: object, config: ProbeConfig | None = None, *, serve: bool | None = None) -> Probe:
    """Give ``scheduler`` a probe (its class need not be installed) and, unless told not to,
    serve it on loopback and write its discovery file.  Returns the probe."""
    existing = probe_of(scheduler)
    if existing is not None:
        return existing
    config = config or ProbeConfig.from_env(os.environ)
    probe = Probe(scheduler, config)
    core.adopt(scheduler, probe, HOOKS, Probe)
    if config.serve if serve is None else serve:
        from poolwatch.probe.core.serving import Publisher

        probe.publisher = Publisher(probe, functools.partial(_identify, probe))
        probe.publisher.start()
    return probe


def detach(scheduler: object) -> None:
    """Stop serving, remove the discovery file, give the pool its own ``free`` back (guard v2) and
    forget the probe (tests, shutdown)."""
    core.detach(scheduler, HOOKS, Probe, Probe.close)

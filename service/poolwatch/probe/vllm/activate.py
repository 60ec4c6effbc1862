"""Turning the probe on inside vLLM V1 with zero changes to vLLM.

:func:`vllm_plugin` is the ``vllm.general_plugins`` entry point ``poolwatch``.  vLLM loads that group
in every process it starts, EngineCore included, *before* EngineCore builds its ``Scheduler``.  The
plugin acts only when ``POOLWATCH_PROBE=1`` (vLLM loads every installed plugin when
``VLLM_PLUGINS`` is unset: being installed is not consent; naming ``poolwatch`` in ``VLLM_PLUGINS``
is not either, since that list also selects the other plugins).  It then wraps
``vllm.v1.core.sched.scheduler.Scheduler`` (:func:`~poolwatch.probe.vllm.hooks.install`); each
Scheduler built afterwards gets a probe, processes that never build one (the API server) get none.

A release the probe has not read is refused with one clear log line and vLLM runs untouched;
``POOLWATCH_PROBE_DISABLE=1`` stops all of it; a bad ``POOLWATCH_PROBE_*`` value is logged once.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping

from poolwatch.probe.core.config import armed_config

__all__ = ["SCHEDULER_MODULE", "activate", "vllm_plugin"]

log = logging.getLogger("poolwatch.probe")
SCHEDULER_MODULE = "vllm.v1.core.sched.scheduler"


def activate(environ: Mapping[str, str], *, module: str = SCHEDULER_MODULE) -> bool:
    """Wrap the Scheduler class in ``module``; False when disabled, misconfigured or refused."""
    config = armed_config(environ)
    if config is None:
        return False
    from poolwatch.probe.vllm.hooks import install
    from poolwatch.probe.vllm.shapes import UnknownVllmRelease

    try:
        scheduler = importlib.import_module(module).Scheduler
        install(scheduler, config, version=environ.get("POOLWATCH_VLLM_VERSION"))
    except UnknownVllmRelease as exc:
        log.error("poolwatch probe not installed: %s", exc)
        return False
    return True


def vllm_plugin(
    environ: Mapping[str, str] | None = None, act: Callable[[Mapping[str, str]], object] = activate
) -> None:
    """vLLM general plugin (entry point group ``vllm.general_plugins``, called with no argument:
    the process environment and :func:`activate`); never raises."""
    env = os.environ if environ is None else environ
    try:
        if env.get("POOLWATCH_PROBE", "") == "1":
            act(env)
    except Exception:
        log.warning("poolwatch probe: vLLM plugin activation failed", exc_info=True)

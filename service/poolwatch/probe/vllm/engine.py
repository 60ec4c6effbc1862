"""vLLM V1's spec: what only the vLLM room knows (the neutral probe does the rest).

======================  ======  ===================================================================
method                  when    probe call
======================  ======  ===================================================================
``__init__``            after   attach (the probe is born with the scheduler; one idle sample)
``schedule``            before  ``on_step``: the last step is complete
``update_from_output``  after   ``after_update``: idle when no request is left
``finish_requests``     after   the same (an abort can empty the scheduler between steps)
pool ``free_blocks``    before  ``on_free`` (the pool *instance* is wrapped, at attach)
======================  ======  ===================================================================

Subclasses (vLLM's ``AsyncScheduler``) inherit the wrapped methods.  Activation:
:func:`vllm_plugin` is the ``vllm.general_plugins`` entry point ``poolwatch``.  vLLM loads that group
in every process it starts, EngineCore included, *before* EngineCore builds its ``Scheduler``; the
plugin acts only when ``POOLWATCH_PROBE=1`` (vLLM loads every installed plugin when ``VLLM_PLUGINS``
is unset: being installed is not consent; naming ``poolwatch`` in ``VLLM_PLUGINS`` is not either,
since that list also selects the other plugins).  An idle EngineCore blocks on its input queue and
calls no hook, so the endpoint keeps the idle snapshot fresh (``keepalive``).  This module is
imported at activation: the room's heavier modules load only when a scheduler gets a probe.
"""

from __future__ import annotations

from collections.abc import Mapping

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import Engine, Reader, Release
from poolwatch.probe.core.hooks import Hook
from poolwatch.probe.vllm.identity import vllm_version
from poolwatch.probe.vllm.shapes import release_of

__all__ = ["HOOKS", "VLLM", "vllm_plugin", "vllm_release"]

HOOKS: tuple[Hook, ...] = (
    (("schedule",), "before", "on_step"),
    (("update_from_output",), "after", "after_update"),
    (("finish_requests",), "after", "after_update"),
)


def vllm_release(override: str, installed: str | None = None) -> Release:
    """The release to read: the installed vLLM's (``installed``: read from its package when None),
    as the family of ``override`` (``POOLWATCH_ENGINE_VERSION``) when set, else its own --
    unverified unless it is a final release whose wheel was read
    (:func:`~poolwatch.probe.vllm.shapes.release_of`); :class:`~poolwatch.probe.vllm.shapes.
    UnknownVllmRelease` for one older than the first family, no version at all, or an override
    that is no release number."""
    return release_of(vllm_version() if installed is None else installed, override)


def _open(scheduler: object, config: ProbeConfig, release: Release, environ: Mapping[str, str]) -> Reader:
    from poolwatch.probe.vllm.reader import VllmReader

    return VllmReader(scheduler, config, release, environ)


VLLM = Engine(
    name="vllm",
    scheduler="vllm.v1.core.sched.scheduler:Scheduler",
    hooks=HOOKS,
    release=vllm_release,
    open=_open,
    probe="poolwatch.probe.vllm.extras:VllmProbe",
    plugin_group="vllm.general_plugins",
    keepalive=True,
    release_env="POOLWATCH_VLLM_VERSION",
    logger="vllm",
    consent_hint="POOLWATCH_PROBE=1 (vLLM loads poolwatch's vllm.general_plugins entry point in every "
    "process)",
    plugins_env="VLLM_PLUGINS",
)


def vllm_plugin() -> None:
    """vLLM general plugin (entry point group ``vllm.general_plugins``); never raises."""
    from poolwatch.probe.lifecycle import plugin

    plugin(VLLM.name)

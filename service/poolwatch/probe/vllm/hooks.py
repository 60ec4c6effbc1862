"""Wrapping vLLM V1's ``Scheduler`` at its step boundaries, for the class or one instance.

======================  ======  ===================================================================
method                  when    probe call
======================  ======  ===================================================================
``__init__``            after   :func:`attach` (the probe is born with the scheduler; one idle sample)
``schedule``            before  ``Probe.on_step``: the last step is complete
``update_from_output``  after   ``Probe.after_update``: idle when no request is left
``finish_requests``     after   the same (an abort can empty the scheduler between steps)
pool ``free_blocks``    before  ``Probe.on_free`` (the pool *instance* is wrapped, at attach)
======================  ======  ===================================================================

The wrapping itself (wrappers that never raise into the scheduler, and only forward the call
without a probe) is :mod:`poolwatch.probe.core.hooks`; serving is
:class:`~poolwatch.probe.core.serving.Publisher`, with its idle keepalive (an idle EngineCore calls
no hook: :meth:`~poolwatch.probe.vllm.probe.Probe.refresh_idle`).  Subclasses (vLLM's
``AsyncScheduler``) inherit the wrapped methods.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from poolwatch.model import WorkerId
from poolwatch.probe.core import hooks as core
from poolwatch.probe.core.access import Reading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.vllm.identity import local_index, vllm_version, worker_identity
from poolwatch.probe.vllm.probe import Probe
from poolwatch.probe.vllm.shapes import VllmShape, shape_for

__all__ = ["HOOKS", "attach", "detach", "install", "probe_of", "uninstall"]

log = logging.getLogger("poolwatch.probe")

HOOKS: tuple[core.Hook, ...] = (
    (("schedule",), "before", "on_step"),
    (("update_from_output",), "after", "after_update"),
    (("finish_requests",), "after", "after_update"),
)


def probe_of(scheduler: object) -> Probe | None:
    return core.probe_of(scheduler, Probe)


def _attach_installed(scheduler: object, setup: Any) -> Probe:
    config, shape, version = setup
    return attach(scheduler, config, shape=shape, version=version)


def install(cls: type, config: ProbeConfig, *, version: str | None = None) -> bool:
    """Wrap ``cls``'s step-boundary methods (idempotent).  Raises
    :class:`~poolwatch.probe.vllm.shapes.UnknownVllmRelease` for a release the probe has not read;
    False if ``cls`` was already installed."""
    if core.ORIGINALS in cls.__dict__:
        return False
    version = version or config.sglang_version or os.environ.get("POOLWATCH_VLLM_VERSION") or vllm_version()
    shape = shape_for(version)
    return core.install(cls, HOOKS, Probe, (config, shape, version), _attach_installed)


def uninstall(cls: type) -> None:
    """Undo :func:`install` (tests)."""
    core.uninstall(cls)


def _identify(probe: Probe, reading: Reading) -> tuple[WorkerId, int]:
    worker = worker_identity(probe.scheduler, reading, probe.version, probe.environ)
    return worker, local_index(probe.scheduler, reading)


def attach(
    scheduler: object,
    config: ProbeConfig | None = None,
    *,
    shape: VllmShape | None = None,
    version: str | None = None,
    serve: bool | None = None,
) -> Probe:
    """Give ``scheduler`` a probe (its class need not be installed: the instance's methods are then
    wrapped) and, unless told not to, serve it on loopback with a discovery file."""
    existing = probe_of(scheduler)
    if existing is not None:
        return existing
    config = config or ProbeConfig.from_env(os.environ)
    version = version or os.environ.get("POOLWATCH_VLLM_VERSION") or vllm_version()
    probe = Probe(scheduler, config, shape or shape_for(version), version)
    core.adopt(scheduler, probe, HOOKS, Probe)
    _wrap_free(scheduler, probe)
    # a freshly built scheduler is idle: sample it now, so the endpoint serves a snapshot before the
    # first request (vLLM calls no hook until then, and "no snapshot yet" would read as target down)
    probe.on_idle("attach")
    if config.serve if serve is None else serve:
        from poolwatch.probe.core.serving import Publisher

        probe.publisher = Publisher(
            probe, lambda reading: _identify(probe, reading), keepalive=probe.refresh_idle
        )
        probe.publisher.start()
    return probe


def _pool(scheduler: object) -> Any:
    return getattr(getattr(scheduler, "kv_cache_manager", None), "block_pool", None)


def _wrap_free(scheduler: object, probe: Probe) -> None:
    """Wrap the pool instance's ``free_blocks``: the probe looks at the list, then vLLM frees it."""
    pool = _pool(scheduler)
    original = getattr(pool, "free_blocks", None)
    if pool is None or original is None or "free_blocks" in vars(pool):
        return

    @functools.wraps(original)
    def free_blocks(ordered_blocks: Any, *args: Any, **kwargs: Any) -> Any:
        blocks = list(ordered_blocks)  # an iterator would be spent by the look
        try:
            probe.on_free(blocks)
        except Exception:
            log.debug("poolwatch free tripwire failed", exc_info=True)
        return original(blocks, *args, **kwargs)

    pool.free_blocks = free_blocks


def _unwrap_free(probe: Probe) -> None:
    pool = _pool(probe.scheduler)
    if pool is not None and "free_blocks" in vars(pool):
        del pool.free_blocks


def detach(scheduler: object) -> None:
    """Stop serving, remove the discovery file, unwrap the pool's ``free_blocks`` and forget the
    probe (tests, shutdown)."""
    core.detach(scheduler, HOOKS, Probe, _unwrap_free)

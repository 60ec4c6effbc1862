"""Wrapping vLLM V1's ``Scheduler`` at its step boundaries, for the class or one instance.

======================  ======  ===================================================================
method                  when    probe call
======================  ======  ===================================================================
``__init__``            after   :func:`attach` (the probe is born with the scheduler)
``schedule``            before  ``Probe.on_step``: the last step is complete
``update_from_output``  after   ``Probe.after_update``: idle when no request is left
``finish_requests``     after   the same (an abort can empty the scheduler between steps)
pool ``free_blocks``    before  ``Probe.on_free`` (the pool *instance* is wrapped, at attach)
======================  ======  ===================================================================

The wrappers look the probe up on the instance and call it inside ``try``; nothing they do can raise
into the scheduler, and without a probe they only forward the call.  Subclasses (vLLM's
``AsyncScheduler``) inherit the wrapped methods.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.vllm.identity import vllm_version
from poolwatch.probe.vllm.probe import Probe
from poolwatch.probe.vllm.shapes import VllmShape, shape_for

__all__ = ["HOOKS", "PROBE_ATTR", "attach", "detach", "install", "probe_of", "uninstall"]

log = logging.getLogger("poolwatch.probe")
PROBE_ATTR = "_poolwatch_probe"
_ORIGINALS = "__poolwatch_originals__"
_SETUP = "__poolwatch_setup__"

HOOKS: tuple[tuple[str, str, str], ...] = (
    ("schedule", "before", "on_step"),
    ("update_from_output", "after", "after_update"),
    ("finish_requests", "after", "after_update"),
)


def probe_of(scheduler: object) -> Probe | None:
    probe = getattr(scheduler, PROBE_ATTR, None)
    return probe if isinstance(probe, Probe) else None


def _notify(scheduler: object, call: str, name: str) -> None:
    try:
        probe = probe_of(scheduler)
        if probe is not None:
            getattr(probe, call)(name)
    except Exception:  # the probe guards itself; this is the last line of defence
        log.debug("poolwatch hook %s failed", name, exc_info=True)


def _wrap(name: str, when: str, call: str, original: Callable[..., Any]) -> Callable[..., Any]:
    if when == "before":

        @functools.wraps(original)
        def before(self: object, *args: Any, **kwargs: Any) -> Any:
            _notify(self, call, name)
            return original(self, *args, **kwargs)

        return before

    @functools.wraps(original)
    def after(self: object, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _notify(self, call, name)
        return result

    return after


def _wrap_init(cls: type, original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if probe_of(self) is None:
            try:
                config, shape, version = getattr(cls, _SETUP)
                attach(self, config, shape=shape, version=version)
            except Exception:
                log.warning("poolwatch probe could not attach", exc_info=True)

    return __init__


def install(cls: type, config: ProbeConfig, *, version: str | None = None) -> bool:
    """Wrap ``cls``'s step-boundary methods (idempotent).  Raises
    :class:`~poolwatch.probe.vllm.shapes.UnknownVllmRelease` for a release the probe has not read;
    False if ``cls`` was already installed."""
    if _ORIGINALS in cls.__dict__:
        return False
    version = version or config.sglang_version or os.environ.get("POOLWATCH_VLLM_VERSION") or vllm_version()
    shape = shape_for(version)
    originals: dict[str, Any] = {"__init__": cls.__dict__.get("__init__")}
    setattr(cls, _SETUP, (config, shape, version))
    for name, when, call in HOOKS:
        if callable(getattr(cls, name, None)):
            originals[name] = cls.__dict__.get(name)
            setattr(cls, name, _wrap(name, when, call, getattr(cls, name)))
    cls.__init__ = _wrap_init(cls, cls.__init__)  # type: ignore[misc]
    setattr(cls, _ORIGINALS, originals)
    return True


def uninstall(cls: type) -> None:
    """Undo :func:`install` (tests)."""
    originals = cls.__dict__.get(_ORIGINALS)
    if originals is None:
        return
    for name, original in originals.items():
        if original is None:
            delattr(cls, name)
        else:
            setattr(cls, name, original)
    delattr(cls, _ORIGINALS)
    delattr(cls, _SETUP)


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
    setattr(scheduler, PROBE_ATTR, probe)
    if not any(_ORIGINALS in c.__dict__ for c in type(scheduler).__mro__):
        for name, when, call in HOOKS:
            bound = getattr(scheduler, name, None)
            if callable(bound):
                wrapped = _wrap(name, when, call, lambda _self, *a, _b=bound, **k: _b(*a, **k))
                setattr(scheduler, name, functools.partial(wrapped, scheduler))
    _wrap_free(scheduler, probe)
    if config.serve if serve is None else serve:
        from poolwatch.probe.vllm.publish import Publisher

        probe.publisher = Publisher(probe)
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


def detach(scheduler: object) -> None:
    """Stop serving, remove the discovery file and forget the probe (tests, shutdown)."""
    probe = probe_of(scheduler)
    if probe is None:
        return
    if probe.publisher is not None:
        probe.publisher.stop()
    pool = _pool(scheduler)
    if pool is not None and "free_blocks" in vars(pool):
        del pool.free_blocks
    for name, _when, _call in HOOKS:
        if name in getattr(scheduler, "__dict__", {}):
            delattr(scheduler, name)
    delattr(scheduler, PROBE_ATTR)

"""Wrapping a scheduler's methods at loop boundaries (reference §6.3), for a class or one instance.

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

Wrappers look the probe up on the instance and call it inside ``try``; nothing they do can raise
into the scheduler, and without a probe they only forward the call.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.sglang.scheduler_probe import Probe

__all__ = ["HOOKS", "PROBE_ATTR", "attach", "detach", "hook_names", "install", "probe_of", "uninstall"]

log = logging.getLogger("poolwatch.probe")
PROBE_ATTR = "_poolwatch_probe"
_ORIGINALS = "__poolwatch_originals__"
_CONFIG = "__poolwatch_config__"

# (candidate method names, first existing wins), when, Probe method
HOOKS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("ingest_requests", "recv_requests"), "before", "on_loop_boundary"),
    (("on_idle",), "before", "on_idle"),  # 0.5.12+
    (("self_check_during_idle",), "before", "on_idle"),  # up to 0.5.10
    (("process_prefill_chunk",), "after", "after_prefill_chunk"),
)


def hook_names(owner: object) -> dict[str, tuple[str, str]]:
    """``{method: (when, probe method)}`` for the methods ``owner`` (a class or instance) has."""
    out: dict[str, tuple[str, str]] = {}
    for names, when, call in HOOKS:
        found = next((n for n in names if callable(getattr(owner, n, None))), None)
        if found is not None:
            out[found] = (when, call)
    return out


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
                attach(self, getattr(cls, _CONFIG, None))
            except Exception:
                log.warning("poolwatch probe could not attach", exc_info=True)

    return __init__


def install(cls: type, config: ProbeConfig | None = None) -> bool:
    """Wrap ``cls``'s loop-boundary methods (idempotent); every instance built afterwards gets a
    probe.  Returns False if ``cls`` was already installed."""
    if _ORIGINALS in cls.__dict__:
        return False
    originals: dict[str, Any] = {"__init__": cls.__dict__.get("__init__")}
    setattr(cls, _CONFIG, config)
    for name, (when, call) in hook_names(cls).items():
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
    delattr(cls, _CONFIG)


def _wrap_instance(scheduler: object) -> None:
    for name, (when, call) in hook_names(scheduler).items():
        bound = getattr(scheduler, name)
        wrapped = _wrap(name, when, call, lambda _self, *a, _b=bound, **k: _b(*a, **k))
        setattr(scheduler, name, functools.partial(wrapped, scheduler))


def attach(scheduler: object, config: ProbeConfig | None = None, *, serve: bool | None = None) -> Probe:
    """Give ``scheduler`` a probe (its class need not be installed) and, unless told not to,
    serve it on loopback and write its discovery file.  Returns the probe."""
    existing = probe_of(scheduler)
    if existing is not None:
        return existing
    config = config or ProbeConfig.from_env(os.environ)
    probe = Probe(scheduler, config)
    setattr(scheduler, PROBE_ATTR, probe)
    if _ORIGINALS not in type(scheduler).__dict__ and not any(
        _ORIGINALS in c.__dict__ for c in type(scheduler).__mro__
    ):
        _wrap_instance(scheduler)
    if config.serve if serve is None else serve:
        from poolwatch.probe.sglang.publish import Publisher

        probe.publisher = Publisher(probe)
        probe.publisher.start()
    return probe


def detach(scheduler: object) -> None:
    """Stop serving, remove the discovery file and forget the probe (tests, shutdown)."""
    probe = probe_of(scheduler)
    if probe is None:
        return
    publisher = getattr(probe, "publisher", None)
    if publisher is not None:
        publisher.stop()
    probe.close()  # guard v2: the pool's own free back
    for name in hook_names(scheduler):
        if name in getattr(scheduler, "__dict__", {}):
            delattr(scheduler, name)
    delattr(scheduler, PROBE_ATTR)

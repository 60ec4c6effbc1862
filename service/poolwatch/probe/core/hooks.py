"""Wrapping a scheduler's methods so that a probe runs before or after them, for a class or one instance.

An engine room names its hooks as a table: ``(candidate method names, when, probe method)``; the first
candidate the scheduler has wins, ``when`` is ``"before"`` or ``"after"`` the engine's own method.
:func:`install` wraps a class (and its ``__init__``, so each instance is born with a probe);
:func:`adopt` gives one instance its probe and, if its class was not installed, wraps the instance.

The wrappers look the probe up on the instance (``PROBE_ATTR``, of the engine's probe class) and
call it inside ``try``: nothing they do can raise into the engine, and without a probe they only
forward the call.  :func:`uninstall` and :func:`detach` undo them (tests, shutdown).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = [
    "ORIGINALS",
    "PROBE_ATTR",
    "SETUP",
    "Hook",
    "adopt",
    "detach",
    "hook_names",
    "install",
    "probe_of",
    "release",
    "uninstall",
]

log = logging.getLogger("poolwatch.probe")
PROBE_ATTR = "_poolwatch_probe"
ORIGINALS = "__poolwatch_originals__"  # on an installed class: {method: its own definition or None}
SETUP = "__poolwatch_setup__"  # on an installed class: what its instances' probes are built with

Hook = tuple[tuple[str, ...], str, str]  # (candidate method names, "before"/"after", probe method)
P = TypeVar("P")
Kind = type[Any]  # the engine room's probe class
Attach = Callable[[object, Any], object]  # (scheduler, the class's setup) -> its probe


def hook_names(owner: object, hooks: Iterable[Hook]) -> dict[str, tuple[str, str]]:
    """``{method: (when, probe method)}`` for the methods ``owner`` (a class or instance) has."""
    out: dict[str, tuple[str, str]] = {}
    for names, when, call in hooks:
        found = next((n for n in names if callable(getattr(owner, n, None))), None)
        if found is not None:
            out[found] = (when, call)
    return out


def probe_of(scheduler: object, kind: type[P]) -> P | None:
    """The probe of class ``kind`` attached to ``scheduler``, if any."""
    probe = getattr(scheduler, PROBE_ATTR, None)
    return probe if isinstance(probe, kind) else None


def _notify(scheduler: object, kind: Kind, call: str, name: str) -> None:
    """Tell ``scheduler``'s probe (of class ``kind``) that ``name`` ran: ``probe.<call>(name)``.  The
    lookup is inline, not :func:`probe_of`: the scheduler's hooks call this at every step, right
    after the GPU wait, where each function a hook passes through costs its first touch."""
    try:
        probe = getattr(scheduler, PROBE_ATTR, None)
        if probe is not None and isinstance(probe, kind):
            getattr(probe, call)(name)
    except Exception:  # the probe guards itself; this is the last line of defence
        log.debug("poolwatch hook %s failed", name, exc_info=True)


def _wrap(name: str, when: str, call: str, original: Callable[..., Any], kind: Kind) -> Callable[..., Any]:
    if when == "before":

        @functools.wraps(original)
        def before(self: object, *args: Any, **kwargs: Any) -> Any:
            _notify(self, kind, call, name)
            return original(self, *args, **kwargs)

        return before

    @functools.wraps(original)
    def after(self: object, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _notify(self, kind, call, name)
        return result

    return after


def _wrap_init(cls: type, original: Callable[..., None], kind: Kind, attach: Attach) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if probe_of(self, kind) is None:
            try:
                attach(self, getattr(cls, SETUP, None))
            except Exception:
                log.warning("poolwatch probe could not attach", exc_info=True)

    return __init__


def install(cls: type, hooks: Iterable[Hook], kind: Kind, setup: object, attach: Attach) -> bool:
    """Wrap ``cls``'s hooked methods (idempotent); every instance built afterwards gets a probe from
    ``attach(instance, setup)``.  Returns False if ``cls`` was already installed."""
    if ORIGINALS in cls.__dict__:
        return False
    originals: dict[str, Any] = {"__init__": cls.__dict__.get("__init__")}
    setattr(cls, SETUP, setup)
    for name, (when, call) in hook_names(cls, hooks).items():
        originals[name] = cls.__dict__.get(name)
        setattr(cls, name, _wrap(name, when, call, getattr(cls, name), kind))
    cls.__init__ = _wrap_init(cls, cls.__init__, kind, attach)  # type: ignore[misc]
    setattr(cls, ORIGINALS, originals)
    return True


def uninstall(cls: type) -> None:
    """Undo :func:`install` (tests)."""
    originals = cls.__dict__.get(ORIGINALS)
    if originals is None:
        return
    for name, original in originals.items():
        if original is None:
            delattr(cls, name)
        else:
            setattr(cls, name, original)
    delattr(cls, ORIGINALS)
    delattr(cls, SETUP)


def adopt(scheduler: object, probe: object, hooks: Iterable[Hook], kind: Kind) -> None:
    """Attach ``probe`` to ``scheduler``; wrap the instance's methods unless its class is installed."""
    setattr(scheduler, PROBE_ATTR, probe)
    if any(ORIGINALS in c.__dict__ for c in type(scheduler).__mro__):
        return
    for name, (when, call) in hook_names(scheduler, hooks).items():
        bound = getattr(scheduler, name)
        wrapped = _wrap(name, when, call, lambda _self, *a, _b=bound, **k: _b(*a, **k), kind)
        setattr(scheduler, name, functools.partial(wrapped, scheduler))


def release(scheduler: object, hooks: Iterable[Hook]) -> None:
    """Undo :func:`adopt`: the instance's own wrappers and the probe reference go."""
    for name in hook_names(scheduler, hooks):
        if name in getattr(scheduler, "__dict__", {}):
            delattr(scheduler, name)
    delattr(scheduler, PROBE_ATTR)


def detach(scheduler: object, hooks: Iterable[Hook], kind: Kind, close: Callable[[Any], object]) -> None:
    """Stop the probe's publisher (if serving), ``close(probe)`` (what the engine room wrapped
    besides), then undo :func:`adopt`.  Nothing happens without a probe."""
    probe = probe_of(scheduler, kind)
    if probe is None:
        return
    publisher = getattr(probe, "publisher", None)
    if publisher is not None:
        publisher.stop()
    close(probe)
    release(scheduler, hooks)

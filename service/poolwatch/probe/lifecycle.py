"""Turning the probe on inside an engine with zero changes to it, and on and off one scheduler.

Activation, for every engine in :mod:`poolwatch.engines` alike:

* **the engine's plugin** (:func:`plugin`, what each room's ``*_plugin`` entry point calls): the
  engine loads its plugins in every process it starts, its scheduler's included.  It acts only
  with the engine's consent variable (``POOLWATCH_PROBE=1``, or what ``Engine.consent`` accepts):
  being installed is not consent;
* **the ``.pth`` file** (:func:`activate_from_pth`): the wheel ships ``poolwatch-probe.pth`` into
  site-packages; Python runs it at start-up in every process; it does nothing and imports nothing
  unless ``POOLWATCH_PROBE=1``, and then arms every engine (releases older than an engine's plugin
  framework, SGLang < 0.5.12).

Both arm a one-shot post-import hook for the engine's scheduler module (or act at once if it is
imported already) that wraps its scheduler class (:func:`install`): each scheduler built afterwards
gets a probe when its ``__init__`` returns; processes that never build one get none.  A release
the room cannot read (:class:`~poolwatch.probe.core.engine.UnknownRelease`) is refused with one log
line and the engine runs untouched; ``POOLWATCH_PROBE_DISABLE=1`` stops all of it; a bad
``POOLWATCH_PROBE_*`` value is logged once and nothing is installed.

On one scheduler: :func:`attach` gives it a probe (its class need not be installed: the instance's
methods are wrapped) and, unless told not to, serves it on loopback with a discovery file;
:func:`detach` undoes that.  Every log line here goes through the ``poolwatch.probe`` logger,
which an engine's own logging configuration formats (:func:`_engine_logging`).
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Mapping

from poolwatch.engines import ENGINES, UnknownEngine, engine_entry, load
from poolwatch.probe.core import hooks
from poolwatch.probe.core.config import ProbeConfig, armed_config
from poolwatch.probe.core.engine import Engine, Release, UnknownRelease
from poolwatch.probe.core.post_import import on_import
from poolwatch.probe.core.probe import Clock, Probe, new_probe

__all__ = [
    "activate",
    "activate_from_pth",
    "attach",
    "detach",
    "engine",
    "install",
    "plugin",
    "probe_of",
    "uninstall",
]

log = logging.getLogger("poolwatch.probe")


def engine(name: str) -> Engine:
    """The spec of the engine ``name`` (its room's ``engine`` module imported now)."""
    entry = engine_entry(name)
    if not entry.probe:
        raise UnknownEngine(f"{name!r} has no probe: poolwatch reads it from outside (its log)")
    spec: Engine = load(entry.probe)
    return spec


def probe_of(scheduler: object) -> Probe | None:
    """The probe attached to ``scheduler``, of whatever engine."""
    return hooks.probe_of(scheduler, Probe)


def _config(spec: Engine, config: ProbeConfig | None) -> ProbeConfig:
    return config or ProbeConfig.from_env(os.environ, release_env=spec.release_env)


def install(
    spec: Engine, cls: type, config: ProbeConfig | None = None, *, release: Release | None = None
) -> bool:
    """Wrap ``cls``'s hooked methods (idempotent): every instance built afterwards gets a probe.
    Raises :class:`~poolwatch.probe.core.engine.UnknownRelease` for a release the room cannot read;
    False if ``cls`` was already installed."""
    if hooks.ORIGINALS in cls.__dict__:
        return False
    config = _config(spec, config)
    release = release or spec.release(config.release)
    return hooks.install(cls, spec.hooks, Probe, (spec, config, release), _attach_installed)


def _attach_installed(scheduler: object, setup: tuple[Engine, ProbeConfig, Release]) -> Probe:
    spec, config, release = setup
    return attach(spec, scheduler, config, release=release)


def uninstall(cls: type) -> None:
    """Undo :func:`install` (tests)."""
    hooks.uninstall(cls)


def attach(
    spec: Engine,
    scheduler: object,
    config: ProbeConfig | None = None,
    *,
    release: Release | None = None,
    serve: bool | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    wall: Clock | None = None,
) -> Probe:
    """Give ``scheduler`` a probe of ``spec``'s engine and, unless told not to, serve it on
    loopback and write its discovery file.  Returns the probe (the one it has, if any).
    ``clock`` (monotonic) and ``wall`` (unix) are the probe's time (a simulation's, in tests)."""
    existing = probe_of(scheduler)
    if existing is not None:
        return existing
    config = _config(spec, config)
    times = {k: v for k, v in (("clock", clock), ("wall", wall)) if v is not None}
    probe = new_probe(spec, scheduler, config, release=release, environ=environ, **times)
    hooks.adopt(scheduler, probe, spec.hooks, Probe)
    probe.contain("start", probe.start)  # a half-built scheduler: counted, never raised
    if config.serve if serve is None else serve:
        from poolwatch.probe.endpoint.publisher import Publisher

        keepalive = probe.refresh_idle if spec.keepalive else None
        probe.publisher = Publisher(probe, probe.announce, keepalive=keepalive)
        probe.publisher.start()
    return probe


def detach(scheduler: object) -> None:
    """Stop serving, remove the discovery file, undo the room's extras and forget the probe
    (tests, shutdown).  Nothing happens without a probe."""
    probe = probe_of(scheduler)
    if probe is not None:
        hooks.detach(scheduler, probe.engine.hooks, Probe, lambda attached: attached.close())


def activate(spec: Engine, environ: Mapping[str, str]) -> bool:
    """Arm the probe for ``spec``'s scheduler class: it is wrapped when its module is imported (at
    once if it is already).  False when disabled or misconfigured, or -- the module imported
    already -- when its release was refused.  The release is told only then: an engine that is not
    installed is never imported, and says nothing."""
    _engine_logging(spec)
    config = armed_config(environ, release_env=spec.release_env)
    if config is None:
        return False
    module, _, name = spec.scheduler.partition(":")
    installed: list[bool] = []

    def wrap(mod: types.ModuleType) -> None:
        installed.append(_install_release(spec, getattr(mod, name), config))

    on_import(module, wrap)
    return all(installed)


def _install_release(spec: Engine, cls: type, config: ProbeConfig) -> bool:
    try:
        release = spec.release(config.release)
    except UnknownRelease as exc:
        log.error("poolwatch probe not installed: %s", exc)
        return False
    install(spec, cls, config, release=release)
    return True


def plugin(name: str, environ: Mapping[str, str] | None = None) -> None:
    """An engine plugin's body: activate when the engine's consent variable says so; never raises."""
    env = os.environ if environ is None else environ
    try:
        spec = engine(name)
        if spec.consent(env):
            activate(spec, env)
    except Exception:
        log.warning("poolwatch probe: %s plugin activation failed", name, exc_info=True)


def activate_from_pth() -> None:
    """Run by ``poolwatch-probe.pth`` when ``POOLWATCH_PROBE=1``: arm every engine; never raises."""
    for entry in ENGINES:
        if not entry.probe:
            continue  # read from outside only: nothing to arm
        try:
            activate(engine(entry.name), os.environ)
        except Exception:
            log.warning("poolwatch probe: .pth activation for %s failed", entry.name, exc_info=True)


class _ToEngine(logging.Handler):
    """Hands the probe's log records to the engine's own logger, to be formatted and written by
    whatever handlers the engine has configured there by the time a record is logged."""

    def __init__(self, engine_logger: str) -> None:
        super().__init__()
        self.engine_logger = engine_logger

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(self.engine_logger).handle(record)


def _engine_logging(spec: Engine) -> None:
    """Route ``poolwatch.probe``'s lines through the engine's logger (``Engine.logger``), so they
    come out in the engine's own format instead of Python's bare last-resort handler (an engine
    that logs through the root logger needs nothing: records propagate there)."""
    if not spec.logger or any(isinstance(h, _ToEngine) for h in log.handlers):
        return
    log.addHandler(_ToEngine(spec.logger))
    log.propagate = False

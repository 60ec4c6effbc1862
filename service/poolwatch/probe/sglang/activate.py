"""Turning the probe on inside SGLang with zero changes to SGLang.

* **SGLang >= 0.5.12**: :func:`sglang_plugin` is the ``sglang.srt.plugins`` entry point
  ``poolwatch``; SGLang calls it once per process.  It acts only when ``SGLANG_PLUGINS`` names
  ``poolwatch`` or ``POOLWATCH_PROBE=1`` (SGLang loads *every* installed plugin when
  ``SGLANG_PLUGINS`` is unset; being installed is not consent).
* **Older releases**: the wheel ships ``poolwatch-probe.pth`` into site-packages.  Python runs it
  at start-up in every process, SGLang's spawned scheduler processes included; it does nothing and
  imports nothing unless ``POOLWATCH_PROBE=1``, and then calls :func:`activate_from_pth`.

Both paths install a one-shot post-import hook for ``sglang.srt.managers.scheduler`` (or act at
once if it is already imported) that wraps the ``Scheduler`` class
(:func:`~poolwatch.probe.sglang.hooks.install`).
A process that never builds a ``Scheduler`` (tokenizer, detokenizer, the HTTP server) gets no
probe; each scheduler process gets one when its ``Scheduler.__init__`` returns.
``POOLWATCH_PROBE_DISABLE=1`` stops all of it; a bad ``POOLWATCH_PROBE_*`` value is logged once
and leaves SGLang untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from poolwatch.probe.core.config import armed_config

__all__ = ["SCHEDULER_MODULE", "activate", "activate_from_pth", "on_import", "sglang_plugin"]

log = logging.getLogger("poolwatch.probe")
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
Callback = Callable[[types.ModuleType], None]


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, then calls back with the executed module."""

    def __init__(self, real: importlib.abc.Loader, finder: _PostImport) -> None:
        self._real, self._finder = real, finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._real.exec_module(module)
        self._finder.fire(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _PostImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callback) -> None:
        self.name, self.callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if isinstance(finder, _PostImport) or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self)
                return spec
        return None

    def fire(self, module: types.ModuleType) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            self.callback(module)
        except Exception:
            log.warning("poolwatch probe: post-import hook for %s failed", self.name, exc_info=True)


def on_import(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    if any(isinstance(f, _PostImport) and f.name == name for f in sys.meta_path):
        return  # armed already (a venv's site-packages can be processed twice via lib64)
    sys.meta_path.insert(0, _PostImport(name, callback))


def activate(environ: Mapping[str, str], *, module: str = SCHEDULER_MODULE) -> bool:
    """Arm the probe for the scheduler class in ``module``; False when disabled or misconfigured."""
    config = armed_config(environ)
    if config is None:
        return False

    def install_scheduler(mod: types.ModuleType) -> None:
        from poolwatch.probe.sglang.hooks import install

        install(mod.Scheduler, config)

    on_import(module, install_scheduler)
    return True


def _plugin_wanted(environ: Mapping[str, str]) -> bool:
    names = {n.strip() for n in environ.get("SGLANG_PLUGINS", "").split(",")}
    return "poolwatch" in names or environ.get("POOLWATCH_PROBE", "") == "1"


def sglang_plugin() -> None:
    """SGLang >= 0.5.12 general plugin (entry point group ``sglang.srt.plugins``)."""
    try:
        if _plugin_wanted(os.environ):
            activate(os.environ)
    except Exception:
        log.warning("poolwatch probe: plugin activation failed", exc_info=True)


def activate_from_pth() -> None:
    """Run by ``poolwatch-probe.pth`` when ``POOLWATCH_PROBE=1``; never raises."""
    try:
        activate(os.environ)
    except Exception:
        log.warning("poolwatch probe: .pth activation failed", exc_info=True)

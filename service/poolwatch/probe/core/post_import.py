"""Acting the moment a module is imported: a one-shot post-import hook (stdlib only).

An engine's scheduler module is imported late, in a process the engine spawns; the probe's
activation (a ``.pth`` line or an engine plugin, run before that) arms :func:`on_import`, which
calls back with the executed module -- or at once when it is already imported.  The hook removes
itself after firing; a callback that raises is logged, never raised into the importer.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Callback", "on_import"]

log = logging.getLogger("poolwatch.probe")
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

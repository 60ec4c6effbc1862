"""Every generator of committed artifacts, and the drift check over them."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path

__all__ = ["GENERATORS", "drift", "render_all", "write_all"]

# modules exposing artifacts() or artifacts(root) -> {repo-relative path: content}
GENERATORS: tuple[str, ...] = ("poolwatch.artifacts.readme",)


def _call(module_name: str, root: Path) -> dict[str, str]:
    fn: Callable[..., dict[str, str]] = importlib.import_module(module_name).artifacts
    return fn(root) if inspect.signature(fn).parameters else fn()


def render_all(root: Path) -> dict[str, str]:
    """Every artifact's expected content; two generators may not claim one path."""
    out: dict[str, str] = {}
    for name in GENERATORS:
        for path, content in _call(name, root).items():
            if path in out:
                raise ValueError(f"{path} is generated twice (second time by {name})")
            out[path] = content
    return out


def drift(root: Path) -> list[str]:
    """Paths whose committed content differs from what the generators produce."""
    stale = []
    for path, content in sorted(render_all(root).items()):
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != content:
            stale.append(path)
    return stale


def write_all(root: Path) -> list[str]:
    """Write every artifact that changed; returns the paths written."""
    written = []
    for path, content in sorted(render_all(root).items()):
        target = root / path
        if target.is_file() and target.read_text(encoding="utf-8") == content:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        written.append(path)
    return written

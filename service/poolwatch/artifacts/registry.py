"""Every generator of committed artifacts, and the drift check over them.

A generator is a module-level function named ``artifacts(root, config)`` in a module of
:mod:`poolwatch.artifacts`; it returns ``{repo-relative path: content}``.  :data:`GENERATORS` lists
them as imported functions, not names, so a renamed module fails at import; a test walks the
package and fails when a module defines a generator that is not listed here.  ``poolwatch
generate`` writes what they return and ``poolwatch generate --check`` fails on any difference:
the README tables, the rules file, the PrometheusRule, the runbook index, the dashboards and the
Alertmanager configuration (plain and as an ``AlertmanagerConfig``), each engine page's
release table, and the import contracts that name the engine rooms (in ``pyproject.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from poolwatch.artifacts import contracts, dashboards, engine_docs, readme, rules
from poolwatch.artifacts.alertmanager import configs as alertmanager
from poolwatch.detect.config import MixinConfig

__all__ = ["GENERATORS", "Generator", "drift", "render_all", "write_all"]

Generator = Callable[[Path, MixinConfig], Mapping[str, str]]

GENERATORS: tuple[Generator, ...] = (
    readme.artifacts,
    rules.artifacts,
    dashboards.artifacts,
    alertmanager.artifacts,
    engine_docs.artifacts,
    contracts.artifacts,
)


def render_all(root: Path, config: MixinConfig | None = None) -> dict[str, str]:
    """Every artifact's expected content; two generators may not claim one path."""
    config = config or MixinConfig()
    out: dict[str, str] = {}
    for generate in GENERATORS:
        for path, content in generate(root, config).items():
            if path in out:
                raise ValueError(f"{path} is generated twice (second time by {generate.__module__})")
            out[path] = content
    return out


def _changed(root: Path, config: MixinConfig | None, out: Path | None) -> list[tuple[str, Path, str]]:
    """``(path, target, content)`` of every artifact whose file under ``out`` (default: ``root``)
    differs from what the generators produce, or is missing."""
    base = out or root
    return [
        (path, base / path, content)
        for path, content in sorted(render_all(root, config).items())
        if not (base / path).is_file() or (base / path).read_text(encoding="utf-8") != content
    ]


def drift(root: Path, config: MixinConfig | None = None, out: Path | None = None) -> list[str]:
    """Paths under ``out`` (default: ``root``) whose content differs from what the generators produce."""
    return [path for path, _, _ in _changed(root, config, out)]


def write_all(root: Path, config: MixinConfig | None = None, out: Path | None = None) -> list[str]:
    """Write every artifact that changed under ``out`` (default: ``root``); returns the paths written."""
    written = []
    for path, target, content in _changed(root, config, out):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        written.append(path)
    return written

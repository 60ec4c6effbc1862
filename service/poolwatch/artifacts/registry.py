"""Every generator of committed artifacts, and the drift check over them.

A generator is a module-level function named ``artifacts(root, config)`` in a module of
:mod:`poolwatch.artifacts`; it returns ``{repo-relative path: content}``.  :data:`GENERATORS` lists
them as imported functions, not names, so a renamed module fails at import; a test walks the
package and fails when a module defines a generator that is not listed here.  ``poolwatch
generate`` writes what they return and ``poolwatch generate --check`` fails on any difference:
the README tables, the rules file, the PrometheusRule, the runbook index, the dashboards and the
Alertmanager configuration (plain and as an ``AlertmanagerConfig``), the Helm chart's files, each
engine page's release table, and the import contracts that name the engine rooms (in
``pyproject.toml``).

Two kinds: :data:`DEPLOYABLE` generators build from code alone (the rules, the dashboards, the
Alertmanager configuration, the Helm chart's files: what a user renders for their own labels from
the installed package, ``poolwatch generate --config ... --out DIR``); :data:`DOCUMENTS` rewrite
the repository's own files (the README's tables, the engine pages' release tables, the import
contracts in ``pyproject.toml``) and need a clone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from poolwatch.artifacts import contracts, dashboards, engine_docs, helm_chart, readme, rules
from poolwatch.artifacts.alertmanager import configs as alertmanager
from poolwatch.detect.config import MixinConfig

__all__ = ["DEPLOYABLE", "DOCUMENTS", "GENERATORS", "Generator", "drift", "render_all", "write_all"]

Generator = Callable[[Path, MixinConfig], Mapping[str, str]]

DEPLOYABLE: tuple[Generator, ...] = (
    rules.artifacts,
    dashboards.artifacts,
    alertmanager.artifacts,
    helm_chart.artifacts,
)
DOCUMENTS: tuple[Generator, ...] = (readme.artifacts, engine_docs.artifacts, contracts.artifacts)
GENERATORS: tuple[Generator, ...] = (*DEPLOYABLE, *DOCUMENTS)


def render_all(
    root: Path, config: MixinConfig | None = None, generators: tuple[Generator, ...] = GENERATORS
) -> dict[str, str]:
    """Every artifact's expected content (of ``generators``: default all); two generators may not
    claim one path."""
    config = config or MixinConfig()
    out: dict[str, str] = {}
    for generate in generators:
        for path, content in generate(root, config).items():
            if path in out:
                raise ValueError(f"{path} is generated twice (second time by {generate.__module__})")
            out[path] = content
    return out


def _changed(
    root: Path, config: MixinConfig | None, out: Path | None, generators: tuple[Generator, ...]
) -> list[tuple[str, Path, str]]:
    """``(path, target, content)`` of every artifact of ``generators`` whose file under ``out``
    (default: ``root``) differs from what they produce, or is missing."""
    base = out or root
    return [
        (path, base / path, content)
        for path, content in sorted(render_all(root, config, generators).items())
        if not (base / path).is_file() or (base / path).read_text(encoding="utf-8") != content
    ]


def drift(
    root: Path,
    config: MixinConfig | None = None,
    out: Path | None = None,
    generators: tuple[Generator, ...] = GENERATORS,
) -> list[str]:
    """Paths under ``out`` (default: ``root``) whose content differs from what the generators produce."""
    return [path for path, _, _ in _changed(root, config, out, generators)]


def write_all(
    root: Path,
    config: MixinConfig | None = None,
    out: Path | None = None,
    generators: tuple[Generator, ...] = GENERATORS,
) -> list[str]:
    """Write every artifact that changed under ``out`` (default: ``root``); returns the paths written."""
    written = []
    for path, target, content in _changed(root, config, out, generators):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        written.append(path)
    return written

"""Each engine's release table in its page, ``docs/engines/<engine>.md``, generated from the data its
probe room reads releases with (:attr:`~poolwatch.engines.EngineEntry.releases`), between the
``releases`` markers; the rest of the page is hand-written.  A page that is missing, or has no
markers, is a :class:`~poolwatch.errors.ConfigError` saying what to write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from poolwatch.artifacts.blocks import replace_block
from poolwatch.detect.config import MixinConfig
from poolwatch.engines import ENGINES, EngineEntry, load
from poolwatch.errors import ConfigError

__all__ = ["artifacts", "page_of"]


def page_of(entry: EngineEntry) -> str:
    return f"docs/engines/{entry.name}.md"


def artifacts(root: Path, config: MixinConfig, entries: tuple[EngineEntry, ...] = ENGINES) -> dict[str, str]:
    """Every engine page with a release table, regenerated (independent of ``config``)."""
    del config
    out: dict[str, str] = {}
    for entry in entries:
        if not entry.releases:
            continue
        table: Callable[[], str] = load(entry.releases)
        path = page_of(entry)
        out[path] = replace_block(_page(root, entry), "releases", table(), path)
    return out


def _page(root: Path, entry: EngineEntry) -> str:
    try:
        return (root / page_of(entry)).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{page_of(entry)} does not exist: {entry.name}'s registry entry names a release table "
            "(EngineEntry.releases), which is generated into that page (docs/probe.md, Adding an engine)"
        ) from None

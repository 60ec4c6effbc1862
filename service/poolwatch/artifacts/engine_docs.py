"""Each engine's release table in its page, ``docs/engines/<engine>.md``, generated from the data its
probe room reads releases with (:attr:`~poolwatch.engines.EngineEntry.releases`), between the
``releases`` markers; the rest of the page is hand-written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from poolwatch.artifacts.blocks import replace_block
from poolwatch.detect.config import MixinConfig
from poolwatch.engines import ENGINES, EngineEntry, load

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
        out[path] = replace_block((root / path).read_text(encoding="utf-8"), "releases", table(), path)
    return out

"""The README's generated tables (metrics from the catalogue, alerts from the detector families, the
engines and the releases their probe reads from the same data as each engine page's release table),
each between a begin and an end marker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from poolwatch.artifacts.blocks import replace_block
from poolwatch.catalog.metrics import markdown_table
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.rules import FAMILIES
from poolwatch.engines import ENGINES, load

__all__ = ["BLOCKS", "alerts_table", "artifacts", "engines_table", "render"]


def alerts_table() -> str:
    """Every alert, by family (the family named on its first row)."""
    rows = ["| family | alert | severity | meaning | runbook |", "|---|---|---|---|---|"]
    for family in FAMILIES:
        for i, a in enumerate(family.alerts(MixinConfig())):
            severities = " / ".join(dict.fromkeys(s.value for s in a.severities))
            named = family.title if i == 0 else ""
            rows.append(
                f"| {named} | `{a.name}` | {severities} | {a.meaning} | [{a.name}]({a.runbook_path}) |"
            )
    return "\n".join(rows)


def engines_table() -> str:
    """One row per engine: the releases its probe reads (the ``summary`` beside the function that
    makes its page's release table, ``EngineEntry.releases``) and its page."""
    rows = ["| engine | releases the probe reads | details |", "|---|---|---|"]
    for entry in ENGINES:
        if not entry.releases:
            continue
        summary: Callable[[], str] = load(entry.releases.rpartition(":")[0] + ":summary")
        page = f"docs/engines/{entry.name}.md"
        rows.append(f"| {entry.title} | {summary()} | [{page}]({page}) |")
    return "\n".join(rows)


BLOCKS: dict[str, Callable[[], str]] = {
    "engines": engines_table,
    "metrics": markdown_table,
    "alerts": alerts_table,
}


def render(readme: str) -> str:
    """``readme`` with every generated block replaced by its current content."""
    for name, make in BLOCKS.items():
        readme = replace_block(readme, name, make(), "README.md")
    return readme


def artifacts(root: Path, config: MixinConfig) -> dict[str, str]:
    """README.md with its tables regenerated (they do not depend on ``config``)."""
    del config
    return {"README.md": render((root / "README.md").read_text(encoding="utf-8"))}

"""Sources of snapshots, selected by name from the settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from poolwatch.settings import Settings
from poolwatch.sources.base import Source, Target
from poolwatch.sources.file import FileSource

__all__ = ["Source", "Target", "build_sources"]


def build_sources(settings: Settings, clock: Callable[[], float]) -> list[Source]:
    """One source per configured target."""
    ident = settings.identity
    sources: list[Source] = []
    for path in settings.targets.snapshot_files:
        target = Target(f"file:{Path(path).name}", "file", path, ident.worker, ident.role)
        sources.append(FileSource(target, clock, settings.scrape.max_body_bytes))
    return sources

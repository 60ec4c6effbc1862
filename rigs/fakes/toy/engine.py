"""The toy engine's spec: its scheduler class, its two hooks, its (single) release, its reader.

No probe subclass (no ``probe``): the neutral probe's ``step`` and ``idle`` are the hooks' calls."""

from __future__ import annotations

from collections.abc import Mapping

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import Engine, Reader, Release, UnknownRelease

RELEASE = "1.0"


def toy_release(override: str) -> Release:
    version = override or RELEASE
    if version != RELEASE:
        raise UnknownRelease(f"toy {version} is not a release poolwatch has read (known: {RELEASE})")
    return Release(version, "v1")


def _open(scheduler: object, config: ProbeConfig, release: Release, environ: Mapping[str, str]) -> Reader:
    from rigs.fakes.toy.reader import ToyReader

    return ToyReader(scheduler)


TOY = Engine(
    name="toy",
    scheduler="rigs.fakes.toy.scheduler:ToyScheduler",
    hooks=((("step",), "before", "step"), (("idle",), "before", "idle")),
    release=toy_release,
    open=_open,
)

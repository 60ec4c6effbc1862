"""The engine registry (poolwatch/engines.py) is the one list of engines: every entry resolves to its
rooms' specs, and every room folder -- a probe room, a sources room -- has an entry (a registry that
silently forgets a room would leave it never activated, never read)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poolwatch.artifacts.contracts import NEUTRAL
from poolwatch.engines import DEFAULT_ENGINE, ENGINES, UnknownEngine, engine_entry, engine_names, load
from poolwatch.probe.core.engine import Engine
from poolwatch.sources.engine import EngineSources

PACKAGE = Path(__file__).resolve().parents[1] / "service" / "poolwatch"


def rooms(parent: str) -> set[str]:
    folder, neutral = PACKAGE / parent, NEUTRAL[parent]  # the neutral floors the contracts are made with
    return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file() and p.name not in neutral}


def test_every_probe_room_is_registered_and_every_entry_loads_its_spec() -> None:
    assert rooms("probe") == set(engine_names())
    for entry in ENGINES:
        spec = load(entry.probe)
        assert isinstance(spec, Engine)
        assert spec.name == entry.name
        assert spec.scheduler.count(":") == 1


def test_every_sources_room_is_registered_and_every_entry_loads_its_spec() -> None:
    with_sources = {e.name for e in ENGINES if e.sources}
    assert rooms("sources") == with_sources
    for entry in ENGINES:
        if entry.sources:
            room = load(entry.sources)
            assert isinstance(room, EngineSources)
            assert room.engine == entry.name


def test_the_default_engine_is_registered_and_names_are_unique() -> None:
    assert DEFAULT_ENGINE in engine_names()
    assert len(set(engine_names())) == len(ENGINES)
    with pytest.raises(UnknownEngine, match=re.escape(f"(known: {', '.join(engine_names())})")):
        engine_entry("tgi")


def test_every_engine_plugin_is_an_entry_point_of_the_package() -> None:
    pyproject = (PACKAGE.parents[1] / "pyproject.toml").read_text()
    for entry in ENGINES:
        spec: Engine = load(entry.probe)
        if spec.plugin_group:
            module = entry.probe.partition(":")[0]
            assert f'[project.entry-points."{spec.plugin_group}"]\npoolwatch = "{module}:' in pyproject


def test_every_release_table_is_generated_from_its_room_without_the_engine_installed() -> None:
    # the sidecar's environment runs `poolwatch generate`: no engine, no torch
    code = (
        "import sys\nfrom poolwatch.engines import ENGINES, load\n"
        "tables = [load(e.releases)() for e in ENGINES if e.releases]\n"
        "print(len(tables), all(t.startswith('| family |') for t in tables))\n"
        "print(sorted(m for m in ('torch', 'vllm', 'sglang') if m in sys.modules))\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    with_table = sum(1 for e in ENGINES if e.releases)  # a probe-only engine may have none
    assert out.split("\n")[:2] == [f"{with_table} True", "[]"]

"""The engine registry (poolwatch/engines.py) is the one list of engines: every entry resolves to its
rooms' specs, and every room folder -- a probe room, a sources room -- has an entry (a registry that
silently forgets a room would leave it never activated, never read)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from unittest import mock

import pytest

from poolwatch.artifacts.contracts import NEUTRAL
from poolwatch.engines import (
    DEFAULT_ENGINE,
    ENGINES,
    EngineEntry,
    UnknownEngine,
    engine_entry,
    engine_names,
    load,
    probed_engines,
    read_engine,
    read_engines,
)
from poolwatch.probe import lifecycle
from poolwatch.probe.core.engine import Engine
from poolwatch.sources.engine import EngineSources

PACKAGE = Path(__file__).resolve().parents[1] / "service" / "poolwatch"


def rooms(parent: str) -> set[str]:
    folder, neutral = PACKAGE / parent, NEUTRAL[parent]  # the neutral floors the contracts are made with
    return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file() and p.name not in neutral}


def test_every_probe_room_is_registered_and_every_entry_loads_its_spec() -> None:
    assert rooms("probe") == set(probed_engines())
    for entry in (e for e in ENGINES if e.probe):  # an engine read from outside only has none
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
            assert room.kinds == entry.source_kinds  # the registry's channels are the room's


def test_a_sources_room_and_its_channels_go_together_and_a_log_is_one_of_them() -> None:
    for bad in ({"sources": "m:S"}, {"channels": ("log",)}, {"sources": "m:S", "channels": ("metrics",)}):
        with pytest.raises(ValueError, match="engine 'toy'"):
            EngineEntry("toy", "Toy", probe="m:T", **bad)  # type: ignore[arg-type]
    entry = EngineEntry("toy", "Toy", probe="m:T", sources="m:S", channels=("log", "metrics"))
    assert entry.source_kinds == ("toy-metrics", "toy-log")


def test_an_engine_has_a_probe_room_a_sources_room_or_both() -> None:
    with pytest.raises(ValueError, match="engine 'toy': a probe room, a sources room or both"):
        EngineEntry("toy", "Toy")
    outside_only = EngineEntry("toy", "Toy", sources="m:S", channels=("log",))  # a log-only engine
    assert probed_engines((*ENGINES, outside_only)) == probed_engines()
    with (
        mock.patch("poolwatch.probe.lifecycle.engine_entry", return_value=outside_only),
        pytest.raises(UnknownEngine, match="'toy' has no probe: poolwatch reads it from outside"),
    ):
        lifecycle.engine("toy")


def test_the_engine_setting_names_an_engine_with_a_sources_room_or_says_why_not() -> None:
    probe_only = EngineEntry("toy", "Toy", probe="rigs.fakes.toy.engine:TOY")
    entries = (*ENGINES, probe_only)
    assert read_engine("vllm", entries).name == "vllm"
    assert read_engines(entries) == tuple(e.name for e in ENGINES if e.sources)
    with pytest.raises(UnknownEngine, match=r"'toy' has no /metrics or log poolwatch reads: .*probe only"):
        read_engine("toy", entries)
    with pytest.raises(UnknownEngine, match=f"expected one of {', '.join(read_engines())}, got 'tgi'"):
        read_engine("tgi", entries)


def test_the_default_engine_is_registered_and_names_are_unique() -> None:
    assert DEFAULT_ENGINE in engine_names()
    assert len(set(engine_names())) == len(ENGINES)
    with pytest.raises(UnknownEngine, match=re.escape(f"(known: {', '.join(engine_names())})")):
        engine_entry("tgi")


def test_every_engine_plugin_is_an_entry_point_of_the_package() -> None:
    pyproject = (PACKAGE.parents[1] / "pyproject.toml").read_text()
    for entry in (e for e in ENGINES if e.probe):
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


# Neutral modules that may still name an engine in code, and why (a module here that no longer does
# fails the test, so the list only shrinks).
NAMES_AN_ENGINE = {
    "engines.py": "the registry itself",
    "codec/schema.py": "the wire's compatibility default: a snapshot naming no engine is SGLang's",
    "codec/fast.py": "the same default, on the fast path",
}


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = [n.body for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))]
    return {id(b[0].value) for b in bodies if b and isinstance(b[0], ast.Expr)}


def names_of_engines(path: Path) -> list[str]:
    """Where a module names an engine in code: an identifier holding an engine's name, a string that
    is an engine's name or one of its target kinds, or a module path into a room (prose -- a
    docstring, a help text, an alert's words -- may name engines)."""
    tree = ast.parse(path.read_text())
    docs, names = _docstrings(tree), engine_names()
    values = {*names, *(k for e in ENGINES for k in e.source_kinds)}
    rooms = tuple(f"poolwatch.{parent}.{name}" for parent in NEUTRAL for name in names)
    found = []
    for node in ast.walk(tree):
        ident = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)
        if isinstance(ident, str) and any(n in ident.lower() for n in names):
            found.append(f"{node.lineno}: {ident}")  # type: ignore[attr-defined]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            named = node.value in values or node.value.startswith(rooms)
            found += [f"{node.lineno}: {node.value!r}"] if named else []
    return found


def test_no_neutral_module_names_an_engine_in_code() -> None:
    neutral = {
        str(p.relative_to(PACKAGE)): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not any(p.is_relative_to(PACKAGE / parent / name) for parent in NEUTRAL for name in engine_names())
    }
    offenders = {rel: found for rel, p in neutral.items() if (found := names_of_engines(p))}
    assert set(offenders) - set(NAMES_AN_ENGINE) == set(), offenders
    assert set(NAMES_AN_ENGINE) - set(offenders) == set(), "no longer names an engine: drop it from the list"


def test_the_engine_name_finder_finds_each_way_of_naming_one(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""About sglang."""\n'
        'HELP = "read SGLang\'s /metrics"\n'  # prose: fine
        'A = "sglang"\nB = "vllm-log"\nC = "poolwatch.probe.vllm.engine:VLLM"\n'
        "def sglang_only() -> None: ...\nSGLANG_ONLY = 1\n"
    )
    assert sorted(f.split(": ", 1)[1] for f in names_of_engines(module)) == sorted(
        ["'sglang'", "'vllm-log'", "'poolwatch.probe.vllm.engine:VLLM'", "sglang_only", "SGLANG_ONLY"]
    )

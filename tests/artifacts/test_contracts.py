"""The import contracts that name the engine rooms are generated from the registry and the room
folders (``poolwatch/artifacts/contracts.py``): a room is covered the moment it exists, registered or
not, and a room left out of the committed contracts fails ``poolwatch generate --check`` -- shown here
on a copy of the package with a third room that imports another room, which the hand-written
contracts of old let through."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from tests.helpers import REPO

from poolwatch.artifacts.contracts import NEUTRAL, PROBE_FLOORS, contracts, neutral_modules, rooms
from poolwatch.artifacts.registry import render_all
from poolwatch.engines import ENGINES, EngineEntry, engine_names, probed_engines

PACKAGE = REPO / "service" / "poolwatch"
NEW = next(f"room{i}" for i in itertools.count() if f"room{i}" not in engine_names())  # a room no one has
BIN = Path(sys.executable).parent


def importlinter(pyproject: Path) -> list[dict[str, Any]]:
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_every_registered_room_and_every_room_folder_is_in_the_committed_contracts() -> None:
    registered = {f"poolwatch.probe.{e.name}" for e in ENGINES if e.probe}
    registered |= {f"poolwatch.sources.{e.name}" for e in ENGINES if e.sources}
    assert set(rooms()) == registered  # the folders on disk are the registry's rooms (tests/test_engines.py)
    committed = importlinter(REPO / "pyproject.toml")
    independence = next(c for c in committed if c["type"] == "independence")
    assert set(independence["modules"]) == registered
    (forbidden,) = [c for c in committed if set(c.get("forbidden_modules", ())) == registered]
    assert set(forbidden["source_modules"]) == set(neutral_modules(PACKAGE, registered))
    probe = next(c for c in committed if c.get("containers") == ["poolwatch.probe"])
    assert probe["layers"][0].split(" | ") == sorted(probed_engines())
    assert probe["layers"][1:] == list(PROBE_FLOORS)


def test_a_room_folder_nobody_registered_is_in_the_contracts_all_the_same(tmp_path: Path) -> None:
    package = tmp_path / "poolwatch"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "probe" / NEW).mkdir()
    (package / "probe" / NEW / "__init__.py").write_text("")
    text = contracts(package, ENGINES)
    assert f'"{" | ".join(sorted([*probed_engines(), NEW]))}"' in text
    assert text.count(f'"poolwatch.probe.{NEW}",') == 2  # forbidden to neutral code, independent
    assert f'"poolwatch.probe.{NEW}"' not in text.split("forbidden_modules")[0].split("source_modules")[1]


def test_a_registered_room_is_in_the_contracts_even_before_its_folder_is() -> None:
    room = "poolwatch.sources.toy.engine:SOURCES"
    toy = EngineEntry("toy", "Toy", probe="poolwatch.probe.toy.engine:TOY", sources=room, channels=("log",))
    assert {"poolwatch.probe.toy", "poolwatch.sources.toy"} <= set(rooms(PACKAGE, (*ENGINES, toy)))
    # a spec outside the package (the tests' reference toy) names no room of ours
    outside = EngineEntry("toy", "Toy", probe="rigs.fakes.toy.engine:TOY")
    assert rooms(PACKAGE, (*ENGINES, outside)) == rooms(PACKAGE, ENGINES)


def test_every_neutral_floor_named_exists_and_every_top_level_module_is_on_a_product_floor() -> None:
    for parent, neutral in NEUTRAL.items():
        for name in neutral:
            assert (PACKAGE / parent / name).is_dir() or (PACKAGE / parent / f"{name}.py").is_file()
    floors = next(
        c for c in importlinter(REPO / "pyproject.toml") if c["type"] == "layers" and "containers" not in c
    )
    on_floors = {m.strip() for layer in floors["layers"] for m in layer.split("|")}
    top = {f"poolwatch.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    top |= {f"poolwatch.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert top - on_floors == set(), "a top-level module on no floor of the product's layers contract"


def _run(argv: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "service")}
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False, timeout=120)


def test_a_third_room_left_out_of_the_contracts_is_caught_and_generate_closes_the_hole(
    tmp_path: Path,
) -> None:
    # a copy of the package with a new probe room that imports SGLang's room
    shutil.copytree(PACKAGE, tmp_path / "service" / "poolwatch", ignore=shutil.ignore_patterns("__pycache__"))
    for path in ("pyproject.toml", "README.md", *render_all(REPO)):  # what generate reads and writes
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, tmp_path / path)
    room = tmp_path / "service" / "poolwatch" / "probe" / NEW
    room.mkdir()
    (room / "__init__.py").write_text('"""A third room."""\n')
    (room / "engine.py").write_text("from poolwatch.probe.sglang.engine import SGLANG\n\nSPEC = SGLANG\n")
    lint = [str(BIN / "lint-imports"), "--no-cache"]

    assert _run(lint, tmp_path).returncode == 0  # the contracts as committed do not know the room
    stale = _run([str(BIN / "poolwatch"), "generate", "--check"], tmp_path)
    assert stale.returncode == 1
    assert "stale: pyproject.toml" in stale.stderr

    assert _run([str(BIN / "poolwatch"), "generate"], tmp_path).returncode == 0
    broken = _run(lint, tmp_path)
    assert broken.returncode == 1, broken.stdout
    assert "The engine rooms are independent of each other BROKEN" in broken.stdout.replace("\n", " ")
    assert f"poolwatch.probe.{NEW}.engine -> poolwatch.probe.sglang.engine" in broken.stdout

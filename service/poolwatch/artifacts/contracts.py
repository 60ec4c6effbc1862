"""The import contracts that name the engine rooms, generated into ``pyproject.toml`` from the
registry (:data:`poolwatch.engines.ENGINES`) and the room folders on disk, so a new room is covered
the moment it exists: neither registering it nor forgetting to can leave it out.

A *room* is a subpackage of ``poolwatch/probe/`` or ``poolwatch/sources/`` that is not one of their
neutral floors (:data:`NEUTRAL`): every such folder, and every room an entry of the registry names.
Three contracts are written between the ``import-contracts`` markers (the rest of the file, and the
contracts that name no room, are hand-written):

* the probe's floors: its rooms on top, then :data:`PROBE_FLOORS`;
* neutral code -- every module of ``poolwatch`` that is not in a room -- never imports a room (the
  rooms are found through the registry, by name, and loaded only when asked);
* the rooms are independent of each other (a probe room and a sources room too).

``poolwatch generate --check`` fails when the block differs from what the registry and the folders
say; ``tests/artifacts/test_contracts.py`` shows a room left out being caught.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import poolwatch
from poolwatch.artifacts.blocks import replace_block
from poolwatch.detect.config import MixinConfig
from poolwatch.engines import ENGINES, EngineEntry

__all__ = ["NEUTRAL", "PROBE_FLOORS", "artifacts", "contracts", "neutral_modules", "rooms"]

PACKAGE = Path(poolwatch.__file__).parent
# the probe's engine-neutral floors under its rooms, top to bottom (activation and attach, serving,
# the neutral probe, its pure proofs)
PROBE_FLOORS = ("lifecycle", "endpoint", "core", "census")
NEUTRAL = {"probe": PROBE_FLOORS, "sources": ("logfile",)}  # subpackages of the room parents that are no room
BLOCK = "import-contracts"


def _children(folder: Path) -> list[str]:
    """The modules and packages directly in ``folder``."""
    return sorted(
        p.stem if p.suffix == ".py" else p.name
        for p in folder.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )


def _registered(entries: Iterable[EngineEntry]) -> set[str]:
    out = set()
    for entry in entries:
        for path in (entry.probe, entry.sources):
            parts = path.partition(":")[0].split(".")
            if len(parts) > 2 and parts[0] == "poolwatch" and parts[1] in NEUTRAL:
                out.add(".".join(parts[:3]))
    return out


def rooms(package: Path = PACKAGE, entries: tuple[EngineEntry, ...] = ENGINES) -> list[str]:
    """Every engine room, ``poolwatch.<parent>.<engine>``: the folders on disk and the registry's."""
    on_disk = {
        f"poolwatch.{parent}.{name}"
        for parent, neutral in NEUTRAL.items()
        for name in _children(package / parent)
        if (package / parent / name / "__init__.py").is_file() and name not in neutral
    }
    return sorted(on_disk | _registered(entries))


def neutral_modules(package: Path = PACKAGE, room_names: Iterable[str] = ()) -> list[str]:
    """Every top-level module of ``poolwatch`` but the room parents, and every child of those that
    is not a room."""
    taken = set(room_names)
    top = [f"poolwatch.{n}" for n in _children(package) if n not in NEUTRAL]
    inner = [f"poolwatch.{p}.{n}" for p in NEUTRAL for n in _children(package / p)]
    return sorted(top + [m for m in inner if m not in taken])


def _list(items: Iterable[str]) -> str:
    return "[\n" + "".join(f'    "{item}",\n' for item in items) + "]"


def contracts(package: Path = PACKAGE, entries: tuple[EngineEntry, ...] = ENGINES) -> str:
    """The generated contracts, as TOML."""
    found = rooms(package, entries)
    probe_rooms = [r.rpartition(".")[2] for r in found if r.startswith("poolwatch.probe.")]
    floors = [" | ".join(probe_rooms), *PROBE_FLOORS]
    return "\n".join(
        [
            "[[tool.importlinter.contracts]]",
            "name = \"The probe's floors: the engine rooms, then activation and attach, then the endpoint, "
            'then the neutral probe and its proofs"',
            'type = "layers"',
            'containers = ["poolwatch.probe"]',
            f"layers = {_list(floors)}",
            "",
            "[[tool.importlinter.contracts]]",
            'name = "Neutral code never imports an engine room: it finds a room through poolwatch.engines, '
            'by name"',
            'type = "forbidden"',
            f"source_modules = {_list(neutral_modules(package, found))}",
            f"forbidden_modules = {_list(found)}",
            "",
            "[[tool.importlinter.contracts]]",
            'name = "The engine rooms are independent of each other"',
            'type = "independence"',
            f"modules = {_list(found)}",
        ]
    )


def artifacts(
    root: Path, config: MixinConfig, package: Path = PACKAGE, entries: tuple[EngineEntry, ...] = ENGINES
) -> dict[str, str]:
    """``pyproject.toml`` with its room contracts regenerated (independent of ``config``)."""
    del config
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    body = contracts(package, entries)
    return {"pyproject.toml": replace_block(text, BLOCK, body, "pyproject.toml", "hash")}

"""The house has no import circle and no upward arrow: ``scripts/house --check`` over the package's
import graph (module-level cycles counted with ``if TYPE_CHECKING:`` imports too, since a type-only
circle is still two modules that cannot be read apart; layers as the import contracts draw them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_has_no_import_circle_and_no_upward_arrow() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "house"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "circles (with TYPE_CHECKING imports): 0" in result.stdout


def test_a_circle_is_found_with_its_members() -> None:
    # the finder itself, on a small graph: a -> b -> c -> a and d -> d's neighbour only
    namespace: dict[str, object] = {"__name__": "house"}
    exec(compile((ROOT / "scripts" / "house").read_text(), "house", "exec"), namespace)
    circles = namespace["circles"]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]  # type: ignore[operator]
    assert circles({"x": {"y"}, "y": set()}) == []  # type: ignore[operator]

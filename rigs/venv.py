"""Where a release runs, and running this checkout's code there.

A release runs in its cached venv (``scripts/prepare_tiers`` makes them under
``${POOLWATCH_CACHE:-~/.cache/poolwatch}``) or, for a release that differs from a neighbour only in
its own Python package, in that neighbour's venv with the release's package first on
``PYTHONPATH`` (an *overlay*, ``scripts/sglang_overlay.py``).  :class:`Venv` says where, what is
missing and the command that makes it; :meth:`Venv.run` runs a module of this checkout there
(``service/`` and the checkout's root on ``PYTHONPATH``, so the probe is this checkout's and
``rigs`` is importable) and reads the JSON lines it prints (:mod:`rigs.checks`).

Stdlib only: the release venvs and ``scripts/`` import it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["ROOT", "Ran", "Unavailable", "Venv", "cache_root", "tool"]

ROOT = Path(__file__).resolve().parents[1]
REQUIRE = "POOLWATCH_REQUIRE_TOOLS"  # set: a missing venv or tool fails a test instead of skipping it


class Unavailable(RuntimeError):
    """Something a rig needs is not on this machine (a release venv, an overlay, a tool).  The
    message names what and the command that makes it; ``require`` is the environment variable
    that, set to ``1``, makes a test fail on it rather than skip (``.ci/run`` sets it)."""

    def __init__(self, message: str, require: str = REQUIRE) -> None:
        super().__init__(message)
        self.require = require


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the release venvs, overlays and layers are cached (``POOLWATCH_CACHE`` moves it)."""
    return Path(environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")


def tool(name: str) -> str:
    """The path of an external tool on ``PATH``; :class:`Unavailable` without it."""
    path = shutil.which(name)
    if path is None:
        raise Unavailable(f"{name} is not installed (see .ci/run for how CI installs it)")
    return path


@dataclass(frozen=True)
class Ran:
    """A module run inside a release venv: the checks it printed (one JSON object a line) and its
    output."""

    results: list[dict[str, Any]]
    stdout: str
    stderr: str
    returncode: int

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if not r.get("ok")]

    @property
    def names(self) -> set[str]:
        return {str(r.get("check")) for r in self.results}


@dataclass(frozen=True)
class Venv:
    """One cached venv a release runs in (and its overlay, for a release without a venv of its own)."""

    label: str  # for messages: "SGLang 0.5.6"
    path: Path
    build: str  # the command that makes the venv
    overlay: Path | None = None  # the release's own package, first on PYTHONPATH
    overlay_build: str = ""  # (it also makes the overlay's layers)
    env: tuple[tuple[str, str], ...] = ()  # what the engine wants set (its plugins off, no hub)
    require: str = REQUIRE
    layers: tuple[Path, ...] = ()  # packages the release pins unlike its base venv, after the overlay

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def missing(self) -> str:
        """Why the release cannot run here ("" when it can)."""
        if not (self.path / ".complete").exists():
            return f"no {self.label} venv at {self.path}: run {self.build}"
        if self.overlay is not None and not (self.overlay / ".complete").exists():
            return f"no {self.label} overlay at {self.overlay}: run {self.overlay_build}"
        for layer in self.layers:
            if not (layer / ".complete").exists():
                return f"no {self.label} layer at {layer}: run {self.overlay_build}"
        return ""

    def need(self) -> None:
        """:class:`Unavailable` when the release cannot run here."""
        reason = self.missing()
        if reason:
            raise Unavailable(reason, self.require)

    def environment(self, base: Mapping[str, str] = os.environ) -> dict[str, str]:
        """``base`` with this checkout's ``service/`` and root (after the overlay and its layers) on
        ``PYTHONPATH``, and torch on one intra-op thread unless ``base`` names a count
        (``OMP_NUM_THREADS``): a release's tensors here are the engine's CPU stand-ins, small, and
        run beside other workers; torch's one worker per core spins against them (the clean runs of
        every SGLang release at ``-n 2`` on 2 cores: 139 s, 96 s on one thread)."""
        path = [*map(str, self.layers), str(ROOT / "service"), str(ROOT)]
        if self.overlay is not None:
            path.insert(0, str(self.overlay))
        env = {**base, "PYTHONPATH": os.pathsep.join(path), "PYTHONWARNINGS": "ignore", **dict(self.env)}
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def run(self, module: str, *args: str, timeout: float = 900) -> Ran:
        """``python -m module args`` with the venv's Python, from the checkout's root."""
        self.need()
        out = subprocess.run(
            [str(self.python), "-m", module, *args],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            check=False,
        )
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        return Ran(lines, out.stdout, out.stderr, out.returncode)

    def reexec(self, script: Path, argv: Sequence[str] = ()) -> NoReturn:
        """Replace this process with ``script`` run by the venv's Python (a benchmark that needs the
        engine and was started from the checkout's ``.venv``)."""
        self.need()
        python = str(self.python)
        sys.stdout.flush()
        os.execve(python, [python, str(script), *argv], self.environment())

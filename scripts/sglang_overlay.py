#!/usr/bin/env python3
"""Fetch (once) the ``sglang`` package of a release that has no venv of its own, to run on the venv
of the nearest release that has one (the guard tier's 0.5.5.post3, 0.5.6, 0.5.10 and 0.5.12, and
the real-bug suite's releases), and the layer of pinned packages it runs with where the release
table names one (``LAYERS``: a transformers older than its base venv's).

    scripts/sglang_overlay.py 0.5.6            # prints the overlay's path and its base venv

A whole release venv costs about 0.4 GB and minutes of dependency resolution; these four releases'
own modules import on a neighbour's dependencies (0.5.5.post3 and 0.5.6 on 0.5.4.post1's, 0.5.10 and
0.5.12 on 0.5.9's: the same torch layer, the same stand-ins for the GPU-kernel packages).  So an
overlay is the release's wheel (``pip download --no-deps``) unpacked to its ``sglang/`` package in
``${POOLWATCH_CACHE:-~/.cache/poolwatch}/sglang-overlays/VERSION``; the tier runs the base venv's
Python with the overlay first on ``PYTHONPATH`` (``rigs/venv.py``), which
imports that release's classes -- allocators, pools, trees, checkers, scheduler -- and tells the probe
the release it reads.  Which releases are overlays, and on which venv, is the rigs' release table's
(``rigs/sglang/releases.py``).  Only stdlib here.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # rigs/: the release table

from venv_build import cache_root, locked, overlay_main, run

from rigs.sglang.releases import LAYERS, RELEASES

BASES = {r.version: r.base for r in RELEASES if r.overlaid}  # the release -> the venv it runs on
PINNED = {r.version: r.layer for r in RELEASES if r.overlaid and r.layer}  # the release -> its layer


def make_layer(name: str, python: str) -> Path:
    """The layer ``name`` of the release table (``LAYERS``): its pins installed once, ``--no-deps``,
    into ``<cache>/layers/sglang-<name>`` (under a lock: two overlays may share it)."""
    root = cache_root() / "layers"
    dest = root / f"sglang-{name}"
    with locked(root / f"{dest.name}.lock"):
        if not (dest / ".complete").exists():
            building = dest.with_name(dest.name + ".building")
            shutil.rmtree(building, ignore_errors=True)
            cmd = [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
                str(building),
            ]
            out = run([*cmd, *LAYERS[name]])
            if out.returncode != 0:
                raise SystemExit(
                    f"pip install --target {building} {' '.join(LAYERS[name])} failed:\n{out.stderr[-3000:]}"
                )
            (building / ".complete").write_text("\n".join(LAYERS[name]) + "\n")
            shutil.rmtree(dest, ignore_errors=True)
            building.rename(dest)
    return dest


def package(name: str) -> bool:
    """A wheel member the overlay keeps: the ``sglang/`` package (no metadata, no scripts)."""
    return name.startswith("sglang/")


def with_layer(version: str, python: str) -> None:
    """The layer the release runs with, where the table names one (its path on stderr)."""
    if version in PINNED:
        print(make_layer(PINNED[version], python), file=sys.stderr)


def main(argv: list[str]) -> int:
    return overlay_main("sglang", BASES, package, __doc__ or "", argv, then=with_layer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

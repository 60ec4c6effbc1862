#!/usr/bin/env python3
"""Fetch (once) the ``sglang`` package of a release that has no venv of its own, to run on the venv
of the nearest release that has one (the guard tier's 0.5.5.post3, 0.5.6, 0.5.10 and 0.5.12).

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

import argparse
import shutil
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # rigs/: the release table

from venv_build import cache_root, download, locked

from rigs.sglang.releases import RELEASES

BASES = {r.version: r.base for r in RELEASES if r.overlaid}  # the release -> the venv it runs on


def unpack(wheel: Path, dest: Path) -> None:
    """The wheel's ``sglang/`` package (no metadata, no scripts) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith("sglang/")])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", maxsplit=1)[0])
    parser.add_argument("version", choices=sorted(BASES))
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip downloads")
    args = parser.parse_args(argv)
    root = cache_root() / "sglang-overlays"
    dest = root / args.version
    with locked(root / f"{args.version}.lock"):
        if args.force or not (dest / ".complete").exists():
            started = time.monotonic()
            shutil.rmtree(dest, ignore_errors=True)
            building = root / f"{args.version}.building"
            shutil.rmtree(building, ignore_errors=True)
            wheel = download(args.python, "sglang", args.version)
            unpack(wheel, building)
            shutil.rmtree(wheel.parent, ignore_errors=True)
            (building / ".complete").write_text(BASES[args.version] + "\n")
            building.rename(dest)
            print(f"fetched {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(dest, BASES[args.version])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

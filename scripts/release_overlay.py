#!/usr/bin/env python3
"""Fetch (once) the Python sources of an engine release that a real-bug check needs and that has no
venv of its own, to run on the venv of a neighbour that has one.

    scripts/release_overlay.py sglang 0.5.20     # prints the overlay's path and its base venv
    scripts/release_overlay.py vllm 0.23.0

The releases here are the *affected* releases of the real bugs the detector checks reproduce
(``tests/sglang_real/witness_*.py``, ``tests/vllm_real/check_inflight.py``) and their controls,
where no cached venv is the release itself.  Each imports its own classes on its neighbour's
dependencies, read and run for issue 39:

===========  =========  ==============================================================
release      base venv  why
===========  =========  ==============================================================
sglang 0.5.5.post2  0.5.4.post1  S12 (protected drift), affected; 0.5.5.post3 is its control
sglang 0.5.20       0.5.23       S13 (decode radix + offload double free), affected
sglang 0.5.21       0.5.23       S13's control (the fix)
vllm 0.23.0         0.26.0       V07 (async + KV consumer: freed while in flight), affected
vllm 0.24.0         0.26.0       V07's control (``deferred_frees``)
vllm 0.25.1         0.26.0       V08 (spec + sliding window rollback), affected; 0.26.0 its control
===========  =========  ==============================================================

An SGLang overlay is the wheel's ``sglang/`` package (as ``scripts/sglang_overlay.py`` makes the
guard tier's); a vLLM overlay is the wheel's ``vllm/`` Python files and its ``dist-info`` (the
compiled extensions are left out: ``vllm._C`` does not load on these CPU venvs anyway).  Both go to
``${POOLWATCH_CACHE:-~/.cache/poolwatch}/<engine>-overlays/VERSION``; the check runs the base venv's
Python with the overlay first on ``PYTHONPATH``.  Only stdlib here.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from venv_build import cache_root, download, locked

BASES: dict[str, dict[str, str]] = {
    "sglang": {"0.5.5.post2": "0.5.4.post1", "0.5.20": "0.5.23", "0.5.21": "0.5.23"},
    "vllm": {"0.23.0": "0.26.0", "0.24.0": "0.26.0", "0.25.1": "0.26.0"},
}


def _wanted(engine: str, name: str) -> bool:
    if engine == "sglang":
        return name.startswith("sglang/")
    return (name.startswith("vllm/") and name.endswith((".py", ".json"))) or (
        name.startswith("vllm-") and ".dist-info/" in name
    )


def unpack(engine: str, wheel: Path, dest: Path) -> None:
    """The wheel's package sources (and, for vLLM, its metadata: ``vllm.__version__`` reads it)."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if _wanted(engine, n)])


def overlay(engine: str, version: str, python: str = sys.executable, *, force: bool = False) -> Path:
    """The overlay's directory, fetched once under a lock."""
    root = cache_root() / f"{engine}-overlays"
    dest = root / version
    with locked(root / f"{version}.lock"):
        if force or not (dest / ".complete").exists():
            started = time.monotonic()
            shutil.rmtree(dest, ignore_errors=True)
            building = root / f"{version}.building"
            shutil.rmtree(building, ignore_errors=True)
            wheel = download(python, engine, version)
            unpack(engine, wheel, building)
            shutil.rmtree(wheel.parent, ignore_errors=True)
            (building / ".complete").write_text(BASES[engine][version] + "\n")
            building.rename(dest)
            print(f"fetched {dest} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return dest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", maxsplit=1)[0])
    parser.add_argument("engine", choices=sorted(BASES))
    parser.add_argument("version")
    parser.add_argument("--force", action="store_true", help="fetch again even if cached")
    parser.add_argument("--python", default=sys.executable, help="the Python whose pip downloads")
    args = parser.parse_args(argv)
    if args.version not in BASES[args.engine]:
        parser.error(
            f"{args.engine} {args.version}: not an overlay release ({', '.join(BASES[args.engine])})"
        )
    dest = overlay(args.engine, args.version, args.python, force=args.force)
    print(dest, BASES[args.engine][args.version])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Fetch (once) the Python of a vLLM release that has no venv of its own, to run on the venv of the
release it sits on (the real-bug suite's 0.21.0 to 0.30.0, on 0.26.0's).

    scripts/vllm_overlay.py 0.23.0            # prints the overlay's path and its base venv

A vLLM release venv is about 1 GB and minutes of resolution; the scheduler, KV cache manager, block
pool and connector scheduler sides of 0.21.0 to 0.30.0 import on 0.26.0's dependencies (the same
torch layer; ``vllm._C`` fails to load in every venv here, and nothing those paths run calls it).
So an overlay is the release's wheel (``pip download --no-deps``, 0.3 to 0.5 GB, seconds) with only
its ``vllm/`` Python sources and JSON data and its ``.dist-info`` (the version the probe reads)
unpacked into ``${POOLWATCH_CACHE:-~/.cache/poolwatch}/vllm-overlays/VERSION`` (30 to 70 MB); the
suite runs the base venv's Python with the overlay first on ``PYTHONPATH`` (``rigs/venv.py``).  Which
releases are overlays, and on which venv, is the rigs' release table's (``rigs/vllm/releases.py``).
Only stdlib here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # rigs/: the release table

from venv_build import overlay_main

from rigs.vllm.releases import RELEASES

BASES = {r.version: r.base for r in RELEASES if r.overlaid}  # the release -> the venv it runs on
KEPT = (".py", ".json")  # of vllm/: its Python and the configs it reads (no compiled extensions)


def wanted(name: str) -> bool:
    """A wheel member the overlay keeps: ``vllm/`` Python and JSON, and the release's metadata."""
    top = name.split("/", maxsplit=1)[0]
    return (top == "vllm" and name.endswith(KEPT)) or (top.startswith("vllm-") and top.endswith(".dist-info"))


def main(argv: list[str]) -> int:
    return overlay_main("vllm", BASES, wanted, __doc__ or "", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

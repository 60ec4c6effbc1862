"""The install lines of the README and the engine pages, as a user copies them.

A block a test runs is marked just above its fence: ``<!-- install:NAME ... -->`` then a ```bash
block.  :func:`install_commands` finds every ``pip install`` a page shows (fenced blocks, indented
blocks and inline code), so a test can hold each to a block it runs."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import REPO

PAGES = (
    REPO / "README.md",
    *sorted((REPO / "docs" / "engines").glob("*.md")),
    REPO / "docs" / "probe.md",
    REPO / "docs" / "deploy.md",
)
VLLM_DOCKERFILE = REPO / "deploy" / "kubernetes" / "examples" / "vllm" / "Dockerfile"
_MARKED = re.compile(r"<!-- install:([a-z-]+)[^\n]*-->\n```(?:bash|sh|dockerfile)\n(.*?)```", re.S)
_PIP = re.compile(r"(?:python3? -m )?pip install [^`\n]*")


def command(line: str) -> str:
    """A shell line without its trailing comment and spaces."""
    return line.split("  #", maxsplit=1)[0].strip()


def marked_blocks(path: Path = REPO / "README.md") -> dict[str, list[str]]:
    """Each marked block of ``path``: its name -> its commands, in order."""
    text = path.read_text(encoding="utf-8")
    return {
        name: [command(line) for line in body.splitlines() if command(line)]
        for name, body in _MARKED.findall(text)
    }


def install_commands(path: Path) -> list[str]:
    """Every ``pip install ...`` the page shows, in code (fenced, indented or inline), trailing
    comments, quotes' closing backtick and a shell continuation dropped."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _PIP.finditer(text):
        line = command(match.group(0)).rstrip("\\").strip()
        found.append(re.sub(r"\s+", " ", line))
    return found

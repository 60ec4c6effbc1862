"""Runbooks cite only what exists: every file they name is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.helpers import REPO

RUNBOOKS = sorted((REPO / "docs/runbooks").glob("*.md"))
# a file name with an extension, not inside a URL (those are links to elsewhere)
_CITED = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)*[\w.-]+\.(?:md|py|yaml|yml|json|txt|sh))\b")


def cited(text: str) -> set[str]:
    """File names the prose cites (shell blocks name output files; URLs point elsewhere)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return set(_CITED.findall(re.sub(r"https?://\S+", "", prose)))


def exists(name: str) -> bool:
    bases = (REPO, REPO / "service", REPO / "docs", REPO / "docs/runbooks")  # service/: a module's path
    return any((base / name).is_file() for base in bases)


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.name)
def test_a_runbook_cites_only_files_that_exist(runbook: Path) -> None:
    missing = sorted(name for name in cited(runbook.read_text(encoding="utf-8")) if not exists(name))
    assert not missing, f"{runbook.name} cites {missing}, which are not in the repository"


def test_the_citation_check_sees_a_missing_reference() -> None:
    text = "reference: `sglang-memory-accounting.md` §4, see docs/deploy.md and https://x.example/a.md"
    text += "\n```sh\ncurl -s localhost:9464/api > out.json\n```\n"
    assert cited(text) == {"sglang-memory-accounting.md", "docs/deploy.md"}
    assert not exists("sglang-memory-accounting.md")

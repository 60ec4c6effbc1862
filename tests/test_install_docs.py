"""Every install line the README and the engine pages show is one a test runs: the README's marked
blocks (tests/test_release.py, in a fresh clone, in clean venvs) or an image's (the vLLM example's
Dockerfile and the SGLang image of docs/deploy.md: tests/deploy/test_install_images.py).  A registry
install (``pip install poolwatch``) appears only where the page says it is not on PyPI yet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poolwatch import __version__
from tests.helpers import REPO
from tests.install_lines import PAGES, VLLM_DOCKERFILE, install_commands, marked_blocks

# a registry line: the package by name, which no index has yet
REGISTRY = re.compile(r"pip install (?:--no-cache-dir )?\"?poolwatch(?:\[emulator\])?(?:==[^\s\"]+)?\"?$")
NEVER = {"pip install -e"}  # shown as what not to do


def run_lines() -> list[str]:
    """The lines the install tests run: every marked block of every page, and the vLLM Dockerfile."""
    lines = [line for page in PAGES for block in marked_blocks(page).values() for line in block]
    dockerfile = re.sub(r"\\\n\s*", " ", VLLM_DOCKERFILE.read_text(encoding="utf-8"))
    return [*lines, *dockerfile.splitlines()]


def paragraph_of(text: str, needle: str) -> str:
    at = text.index(needle)
    start, end = text.rfind("\n\n", 0, at), text.find("\n\n", at)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_install_line_a_page_shows_is_run_by_a_test(page: Path) -> None:
    ran = run_lines()
    text = page.read_text(encoding="utf-8")
    for shown in install_commands(page):
        if shown in NEVER:
            continue
        if REGISTRY.search(shown):
            assert "PyPI" in paragraph_of(text, shown), f"{shown!r} is shown as if it worked today"
            continue
        assert any(shown in line for line in ran), f"{shown!r} is run by no install test"


def test_the_readme_gives_the_working_line_and_says_the_registry_one_fails_today() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "not on PyPI yet" in readme
    assert "`pip install poolwatch` fails today" in readme
    blocks = marked_blocks()
    assert f"pip install dist/poolwatch-{__version__}-py3-none-any.whl" in blocks["wheel"]
    for block in blocks.values():
        assert not [line for line in block if REGISTRY.search(line)], block


def test_the_images_install_the_wheel_built_in_the_clone() -> None:
    (sglang,) = [b for page in PAGES for name, b in marked_blocks(page).items() if name == "sglang-image"]
    assert f"COPY dist/poolwatch-{__version__}-py3-none-any.whl /tmp/" in sglang
    assert "sglang.srt.plugins" in " ".join(sglang)
    assert "COPY dist/poolwatch-${POOLWATCH_VERSION}-py3-none-any.whl /tmp/" in VLLM_DOCKERFILE.read_text()


def test_the_readmes_release_ranges_are_the_engine_pages() -> None:
    """One source: the README's engines table is generated from the data behind each page's release
    table, and no other range of releases is written by hand in the README."""
    from poolwatch.artifacts.readme import engines_table

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert engines_table() in readme
    block = readme[readme.index("<!-- engines:begin") : readme.index("<!-- engines:end")]
    rest = readme.replace(block, "")
    by_hand = re.search(r"vLLM[^.\n]{0,20}\b0\.\d+\.\d+\s*(?:to|-|\u2013)\s*0\.\d+", rest)
    assert by_hand is None, f"a vLLM range written by hand: {by_hand}"
    vllm_page = (REPO / "docs/engines/vllm.md").read_text(encoding="utf-8")
    first, newest = re.search(r"V1, (\S+) to (\S+) \(", block).groups()  # type: ignore[union-attr]
    assert f"releases read, {first} to {newest}" in vllm_page

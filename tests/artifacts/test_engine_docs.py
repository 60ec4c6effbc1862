"""Each engine's release table is generated into its page from the data its probe reads releases
with: the vLLM table lists every release the probe knows as read, once, under the family it reads
it as; a page without its markers is an error naming the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.helpers import REPO

from poolwatch.artifacts.engine_docs import artifacts, page_of
from poolwatch.detect.config import MixinConfig
from poolwatch.engines import ENGINES, EngineEntry
from poolwatch.probe.sglang.shapes import SHAPES as SGLANG_SHAPES
from poolwatch.probe.vllm.shapes import READ, SHAPES, release_of


def block(page: str) -> list[str]:
    """The lines of the generated release table."""
    return page.split("<!-- releases:begin", 1)[1].split("<!-- releases:end -->", 1)[0].splitlines()


def releases_in(row: str) -> list[str]:
    """The releases a vLLM row lists, runs expanded (``0.11.0 to 0.11.2`` -> three)."""
    cell = row.split("|")[2]
    out = []
    for part in cell.split(","):
        low, _, high = part.strip().partition(" to ")
        if not high:
            out.append(low)
            continue
        major, minor, first = low.split(".")
        out += [f"{major}.{minor}.{p}" for p in range(int(first), int(high.split(".")[2]) + 1)]
    return out


def test_every_vllm_release_read_is_listed_once_under_the_family_the_probe_reads_it_as() -> None:
    page = artifacts(REPO, MixinConfig())["docs/engines/vllm.md"]
    rows = [line for line in block(page) if re.match(r"\| `v0\.\d+` \|", line)]
    assert [r.split("`")[1] for r in rows] == [s.family for s in SHAPES]
    listed = {v: r.split("`")[1] for r in rows for v in releases_in(r)}
    assert len(listed) == sum(len(releases_in(r)) for r in rows)  # none twice
    assert set(listed) == {".".join(map(str, v)) for v in READ}
    for version, family in listed.items():
        assert release_of(version).family == family
        assert release_of(version).verified


def test_every_sglang_family_has_a_row() -> None:
    page = artifacts(REPO, MixinConfig())["docs/engines/sglang.md"]
    families = [line.split("|")[1].strip() for line in block(page) if re.match(r"\| 0\.5\.\d", line)]
    assert families == [s.family for s in SGLANG_SHAPES]


def test_an_engine_without_a_release_table_has_no_page_generated(tmp_path: Path) -> None:
    entry = EngineEntry("toy", "Toy", probe="tests.probe.toy.engine:TOY")
    assert artifacts(tmp_path, MixinConfig(), (entry,)) == {}


def test_a_page_without_its_markers_is_an_error_naming_the_page(tmp_path: Path) -> None:
    entry = ENGINES[0]
    page = tmp_path / page_of(entry)
    page.parent.mkdir(parents=True)
    page.write_text("# no table here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(page_of(entry))} has no .*releases:begin"):
        artifacts(tmp_path, MixinConfig(), (entry,))

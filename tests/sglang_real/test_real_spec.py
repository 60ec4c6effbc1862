"""Speculative decoding at ``page_size > 1`` on real SGLang releases (spec v2, the unaligned
over-allocation of 0.5.9 - 0.5.16 and the page-aligned one after PR #31616's class was fixed):
``check_spec_tail.py`` in each release's cached venv, every check passing.  A missing venv skips
with the command that builds it."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import release
from tests.tiers import passed


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.9", "0.5.13"])
def test_spec_decoding_at_page_size_4_strands_no_page_and_the_census_names_none(version: str) -> None:
    passed(release(version).venv(), "tests.sglang_real.check_spec_tail", version, at_least=3)

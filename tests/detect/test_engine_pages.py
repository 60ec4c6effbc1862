"""The pages the sidecar's detector writes, per engine, held against golden copies
(``tests/fixtures/golden/engine-pages.json``).

SGLang's texts are the ones it wrote before alerting became engine-true (issue 43), recorded from
that code: not a word changed, and they are never regenerated.  vLLM's say what vLLM will do -- it
has no idle check, so a leak never promises a crash and pages critical only when large; a double
free names the requests and blocks at risk, and the assertion that a reference count below zero
meets at the next allocation -- in vLLM's unit, blocks.
"""

from __future__ import annotations

import json
import re

import pytest
from tests.detect.engine_pages import SCENARIOS, Page, pages
from tests.helpers import REPO

from poolwatch.artifacts.notification_text import CRASH_PATTERN

_GOLDEN = json.loads((REPO / "tests/fixtures/golden/engine-pages.json").read_text(encoding="utf-8"))
SGLANG: dict[str, list[Page]] = {k: [tuple(p) for p in v] for k, v in _GOLDEN["sglang"].items()}
VLLM: dict[str, list[Page]] = {k: [tuple(p) for p in v] for k, v in _GOLDEN["vllm"].items()}


def test_every_scenario_has_a_golden_page() -> None:
    assert set(SCENARIOS) == set(SGLANG) | set(VLLM)


@pytest.mark.parametrize("name", sorted(SGLANG))
def test_sglang_pages_are_word_for_word_what_they_were(name: str) -> None:
    assert pages(name) == SGLANG[name]


@pytest.mark.parametrize("name", sorted(VLLM))
def test_vllm_pages_say_what_vllm_will_do(name: str) -> None:
    assert pages(name) == VLLM[name]


@pytest.mark.parametrize("name", sorted(VLLM))
def test_no_vllm_page_promises_a_crash_at_an_idle_moment_or_speaks_of_sglang_or_slots(name: str) -> None:
    for _, _, text in pages(name):
        assert not re.search(CRASH_PATTERN, text), text
        assert "SGLang" not in text, text
        assert " slot" not in text, text


def test_a_vllm_leak_is_a_warning_and_critical_only_when_large() -> None:
    assert [severity for _, severity, _ in pages("vllm-leak")] == ["warning"]
    assert [severity for _, severity, _ in pages("vllm-missing")] == ["warning"]
    assert [severity for _, severity, _ in pages("vllm-leak-large")] == ["critical"]


def test_a_vllm_double_free_names_its_requests_and_the_assertion_only_below_zero() -> None:
    [(_, severity, shared)] = pages("vllm-ref-below-owners")
    assert severity == "critical"
    assert "while another still uses it (cmpl-9, cmpl-12)" in shared
    assert "assertion" not in shared
    [(_, _, below)] = pages("vllm-negative-ref")
    assert "fails vLLM's assertion when it is next allocated" in below

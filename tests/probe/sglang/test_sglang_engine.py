"""What only SGLang's spec says: its plugin's consent, its release families as releases."""

from __future__ import annotations

import pytest

from poolwatch.probe.sglang.engine import SGLANG


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"SGLANG_PLUGINS": "other"}, False),
        ({"SGLANG_PLUGINS": "other, poolwatch"}, True),
        ({"POOLWATCH_PROBE": "1"}, True),
    ],
)
def test_the_plugin_acts_only_when_named_or_asked_for(env: dict[str, str], wanted: bool) -> None:
    assert SGLANG.consent(env) is wanted


@pytest.mark.parametrize(
    ("version", "family", "verified"),
    [
        ("0.5.4.post1", "0.5.4", True),
        ("0.5.11", "0.5.10", True),
        ("0.5.23", "0.5.23", True),
        ("0.6.0", "0.5.23", False),  # newer than the newest read: its newest family, unverified
        ("0.4.6.post5", "0.5.4", False),  # older than the first read: its oldest family, unverified
        ("", "0.5.23", False),  # SGLang not installed (the emulator): its newest family, unverified
    ],
)
def test_every_version_reads_as_a_family_and_only_those_read_are_verified(
    version: str, family: str, verified: bool
) -> None:
    release = SGLANG.release(version or "not-a-version") if not version else SGLANG.release(version)
    assert release.family == family
    assert release.verified is verified

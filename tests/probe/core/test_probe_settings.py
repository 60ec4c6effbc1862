"""Settings from the environment and the release families the probe knows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolwatch.discovery.safety import default_directory
from poolwatch.probe.core.config import ProbeConfig, ProbeConfigError
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.shapes import HeldRule, parse_version, shape_for_version


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    config = ProbeConfig.from_env({})
    assert config == ProbeConfig()
    assert (config.directory, config.port_base, config.serve, config.disabled) == (
        default_directory({}),
        None,
        True,
        False,
    )


def test_every_variable_is_read() -> None:
    config = ProbeConfig.from_env(
        {
            "POOLWATCH_PROBE_DISABLE": "1",
            "POOLWATCH_PROBE_DIR": "/x",
            "POOLWATCH_PROBE_PORT_BASE": "9100",
            "POOLWATCH_PROBE_SERVE": "0",
            "POOLWATCH_PROBE_SAMPLE_INTERVAL": "0.5",
            "POOLWATCH_PROBE_SAMPLE_BUDGET": "0.002",
            "POOLWATCH_PROBE_CENSUS_INTERVAL": "2",
            "POOLWATCH_PROBE_KV_CENSUS_INTERVAL": "60",
            "POOLWATCH_PROBE_CHUNK_TRIPWIRE": "false",
            "POOLWATCH_PROBE_MAX_ERRORS": "3",
            "POOLWATCH_PROBE_LAST_WORD_WAIT": "1",
            "POOLWATCH_ENGINE_VERSION": "0.5.9",
            "POOLWATCH_WORKER": "pod-1",
        }
    )
    assert config == ProbeConfig(
        sample_interval_s=0.5,
        sample_budget=0.002,
        census_interval_s=2.0,
        kv_census_interval_s=60.0,
        chunk_tripwire=False,
        directory="/x",
        port_base=9100,
        serve=False,
        disabled=True,
        max_consecutive_errors=3,
        last_word_wait_s=1.0,
        release="0.5.9",
        worker="pod-1",
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("POOLWATCH_PROBE_DISABLE", "maybe"),
        ("POOLWATCH_PROBE_PORT_BASE", "70000"),
        ("POOLWATCH_PROBE_PORT_BASE", "http"),
        ("POOLWATCH_PROBE_SAMPLE_INTERVAL", "-1"),
        ("POOLWATCH_PROBE_SAMPLE_INTERVAL", "inf"),
        ("POOLWATCH_PROBE_CENSUS_INTERVAL", "soon"),
        ("POOLWATCH_PROBE_MAX_ERRORS", "0"),
        ("POOLWATCH_PROBE_MAX_ERRORS", "9" * 5000),
        ("POOLWATCH_PROBE_SAMPLE_INTERVAL", "0"),  # a sample every iteration: -43 % scheduler steps
        ("POOLWATCH_PROBE_SAMPLE_INTERVAL", "1e308"),  # never samples again
        ("POOLWATCH_PROBE_KV_CENSUS_INTERVAL", "0.001"),
        ("POOLWATCH_PROBE_SAMPLE_BUDGET", "0.5"),  # half the scheduler thread
        ("POOLWATCH_PROBE_SAMPLE_BUDGET", "-0.001"),
        ("POOLWATCH_PROBE_SAMPLE_BUDGET", "nan"),
        ("POOLWATCH_PROBE_SAMPLE_BUDGET", "0.1%"),
        ("POOLWATCH_PROBE_SERVE", "perhaps"),
        ("POOLWATCH_PROBE_PORT_BASE", "9" * 5000),
        ("POOLWATCH_WORKER", "pod-\udcff"),  # an undecodable byte from the environment
        ("POOLWATCH_WORKER", "w" * 300),
    ],
)
def test_a_bad_value_is_one_clear_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ProbeConfigError, match=name):
        ProbeConfig.from_env({name: value})


@pytest.mark.parametrize(
    ("version", "family", "mamba_first", "rule"),
    [
        ("0.5.3.post3", "0.5.4", 0, HeldRule.SEQLEN),
        ("0.5.4.post1", "0.5.4", 0, HeldRule.SEQLEN),
        ("0.5.5.post2", "0.5.4", 0, HeldRule.SEQLEN),
        ("0.5.5.post3", "0.5.5.post3", 0, HeldRule.ALLOCATED_PREFIX),
        ("0.5.6", "0.5.6", 0, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.9", "0.5.9", 1, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.10", "0.5.10", 1, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.12", "0.5.12", 1, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.13", "0.5.13", 1, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.15", "0.5.13", 1, HeldRule.ALLOCATED_PROTECTED),
        ("0.5.17", "0.5.17", 1, HeldRule.KV_LENGTHS),
        ("0.5.18", "0.5.17", 1, HeldRule.KV_LENGTHS),
        ("0.5.19", "0.5.19", 1, HeldRule.REQ_KV),
        ("0.5.20", "0.5.20", 1, HeldRule.REQ_KV),
        ("0.5.23", "0.5.23", 1, HeldRule.REQ_KV),
        ("0.6.0rc1", "0.5.23", 1, HeldRule.REQ_KV),
    ],
)
def test_each_release_reads_as_its_family(
    version: str, family: str, mamba_first: int, rule: HeldRule
) -> None:
    shape = shape_for_version(version)
    assert (shape.family, shape.mamba_first_id, shape.held_rule) == (family, mamba_first, rule)


def test_the_hook_and_attribute_names_follow_the_release() -> None:
    old, new = shape_for_version("0.5.4.post1"), shape_for_version("0.5.23")
    assert (old.loop_hook, old.idle_hook, old.hybrid_flags) == (
        "recv_requests",
        "self_check_during_idle",
        ("is_hybrid", "is_hybrid_gdn"),
    )
    assert (new.loop_hook, new.idle_hook, new.hybrid_flags) == (
        "ingest_requests",
        "on_idle",
        ("is_hybrid_swa", "is_hybrid_ssm"),
    )
    assert new.mamba_allocator
    assert not old.mamba_allocator


@given(st.lists(st.integers(0, 99), min_size=1, max_size=3), st.integers(0, 9))
def test_parse_version_reads_release_and_post_numbers(release: list[int], post: int) -> None:
    text = ".".join(map(str, release)) + (f".post{post}" if post else "")
    assert parse_version(text) == (*([*release, 0, 0])[:3], post)


def test_a_probe_on_an_unreadable_installed_version_reads_it_as_the_newest_family_unverified() -> None:
    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.sglang.engine import SGLANG, sglang_release

    release = sglang_release("", installed="main-dev")
    assert (release.family, release.verified) == ("0.5.23", False)
    probe = new_probe(SGLANG, object(), ProbeConfig(serve=False), environ={}, release=release)
    assert probe.shape.family == "0.5.23"


def test_an_override_that_is_no_release_number_keeps_the_probe_off() -> None:
    from poolwatch.probe.core.config import ProbeConfig
    from poolwatch.probe.core.engine import UnknownRelease
    from poolwatch.probe.sglang.engine import SGLANG

    with pytest.raises(UnknownRelease, match="is not a release number"):
        new_probe(SGLANG, object(), ProbeConfig(serve=False, release="main-dev"), environ={})


@pytest.mark.parametrize("text", ["", "dev", "x.5"])
def test_an_unreadable_version_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="unreadable"):
        parse_version(text)


def test_the_probe_entry_points_are_where_the_docs_say() -> None:
    from poolwatch.probe import lifecycle

    assert {"install", "attach", "detach", "uninstall", "probe_of"} <= set(lifecycle.__all__)
    docs = (Path(__file__).resolve().parents[3] / "docs" / "probe.md").read_text()
    assert "poolwatch.probe.lifecycle.attach(SGLANG, scheduler" in docs


@pytest.mark.parametrize(
    ("env", "release", "deprecated"),
    [
        ({"POOLWATCH_ENGINE_VERSION": "0.5.9"}, "0.5.9", ()),
        ({"POOLWATCH_SGLANG_VERSION": "0.5.9"}, "0.5.9", ("POOLWATCH_SGLANG_VERSION",)),
        ({"POOLWATCH_ENGINE_VERSION": "0.5.12", "POOLWATCH_SGLANG_VERSION": "0.5.9"}, "0.5.12", ()),
        ({"POOLWATCH_VLLM_VERSION": "0.33.0"}, "", ()),  # another engine's variable: not this one's
    ],
)
def test_the_release_override_and_its_former_name(
    env: dict[str, str], release: str, deprecated: tuple[str, ...]
) -> None:
    config = ProbeConfig.from_env(env, release_env="POOLWATCH_SGLANG_VERSION")
    assert (config.release, config.deprecated) == (release, deprecated)


def test_an_empty_flag_means_its_default_not_off() -> None:
    assert ProbeConfig.from_env({"POOLWATCH_PROBE_SERVE": ""}).serve
    assert ProbeConfig.from_env({"POOLWATCH_PROBE_CHUNK_TRIPWIRE": " "}).chunk_tripwire

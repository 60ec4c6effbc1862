"""What only SGLang's spec says: its plugin's consent, its release families as releases, its hooks."""

from __future__ import annotations

import pytest

from poolwatch.probe.core.engine import UnknownRelease
from poolwatch.probe.core.hooks import hook_names
from poolwatch.probe.sglang.engine import HOOKS, SGLANG, sglang_release


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
        ("0.5.9rc1", "0.5.9", False),  # a pre-release, development or local build: unverified
        ("0.5.10.dev3+g1a2b3c", "0.5.10", False),
        ("0.5.9+rocm", "0.5.9", False),
        ("0.5.9.post1.dev2", "0.5.9", False),
    ],
)
def test_every_version_reads_as_a_family_and_only_final_releases_read_are_verified(
    version: str, family: str, verified: bool
) -> None:
    release = sglang_release(version) if version else sglang_release("", installed="")
    assert release.family == family
    assert release.verified is verified


@pytest.mark.parametrize(
    ("override", "installed", "family", "verified"),
    [
        ("0.5.23", "0.5.24", "0.5.23", False),  # an override never marks an unread release read
        ("0.5.23", "0.5.23rc1", "0.5.23", False),
        ("0.5.9", "0.5.23", "0.5.9", False),  # read as another family: not what was read
        ("0.5.9", "0.5.9", "0.5.9", True),
        ("", "0.5.9", "0.5.9", True),
    ],
)
def test_an_override_chooses_the_family_never_that_the_release_was_read(
    override: str, installed: str, family: str, verified: bool
) -> None:
    release = sglang_release(override, installed=installed)
    assert (release.family, release.verified, release.version) == (family, verified, installed)


@pytest.mark.parametrize("override", ["0.5.23 junk", "nightly", "latest"])
def test_an_override_that_is_no_release_number_is_refused_clearly(override: str) -> None:
    with pytest.raises(UnknownRelease, match=r"POOLWATCH_ENGINE_VERSION=.* is not a release number"):
        sglang_release(override, installed="0.5.23")


def test_the_running_code_s_own_version_is_the_installed_release() -> None:
    """A release's package put over another release's environment (the guard tier's overlays, a
    source tree) runs that release's code: its own ``sglang.version`` says which, not the metadata."""
    import types

    from poolwatch.probe.sglang.shapes import installed_version

    package, version = types.ModuleType("sglang"), types.ModuleType("sglang.version")
    version.__version__ = "0.5.10"  # type: ignore[attr-defined]
    running = installed_version({"sglang": package, "sglang.version": version})
    assert running == "0.5.10"
    release = sglang_release("0.5.10", installed=running)
    assert (release.family, release.verified) == ("0.5.10", True)


class _Receiving:
    """A 0.5.13 - 0.5.19 scheduler's loop head: the receiver is a component, the scheduler's first
    call of every iteration is ``process_input_requests`` (no ``recv_requests`` method)."""

    def process_input_requests(self, recv_reqs: list[object]) -> None: ...

    def on_idle(self) -> None: ...


class _Ingesting(_Receiving):
    """0.5.20+: ``ingest_requests`` receives and then calls ``process_input_requests`` itself."""

    def ingest_requests(self) -> list[object]:
        return []


def test_the_loop_hook_is_the_first_call_of_each_iteration_on_every_layout() -> None:
    boundary = ("before", "on_loop_boundary")
    assert hook_names(_Receiving, HOOKS)["process_input_requests"] == boundary
    ingesting = hook_names(_Ingesting, HOOKS)  # one boundary an iteration: only ingest_requests
    assert ingesting["ingest_requests"] == boundary
    assert "process_input_requests" not in ingesting

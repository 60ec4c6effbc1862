"""Installing the probe on a scheduler class or instance: wrappers forward, count and never raise."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.hooks import hook_names
from poolwatch.probe.lifecycle import attach, detach, install, probe_of, uninstall
from poolwatch.probe.sglang.engine import SGLANG
from rigs.fakes.sglang import Rank, Scheduler

CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    serve=False,
    directory="/nonexistent-poolwatch-test-dir",
    release="0.5.4.post1",
)


@pytest.fixture
def installed() -> Iterator[type[Scheduler]]:
    install(SGLANG, Scheduler, CONFIG)
    yield Scheduler
    uninstall(Scheduler)


def test_the_loop_idle_and_chunk_hooks_are_found_by_their_release_names() -> None:
    assert hook_names(Scheduler, SGLANG.hooks) == {
        "recv_requests": ("before", "on_loop_boundary"),
        "self_check_during_idle": ("before", "on_idle"),
        "process_prefill_chunk": ("after", "after_prefill_chunk"),
    }

    class Newest:
        def ingest_requests(self) -> None: ...
        def recv_requests(self) -> None: ...
        def on_idle(self) -> None: ...
        def self_check_during_idle(self) -> None: ...

    # both idle methods are wrapped where both exist (the emulator serves every release; each
    # release calls only its own)
    assert set(hook_names(Newest, SGLANG.hooks)) == {"ingest_requests", "on_idle", "self_check_during_idle"}


def test_an_installed_class_gives_every_new_instance_a_probe_that_counts_iterations(installed: type) -> None:
    rank = Rank()
    sched = installed(rank.alloc, rank.rows, rank.tree, max_total_num_tokens=64)
    probe = probe_of(sched)
    assert probe is not None
    assert sched.recv_requests() == []
    assert sched.recv_requests() == []
    assert probe.seq == 2
    assert probe.latest is not None
    assert probe.latest.seq == 2
    assert sched.self_check_during_idle() == "checked"


def test_installing_twice_wraps_once_and_uninstall_restores_the_originals() -> None:
    original = Scheduler.recv_requests
    assert install(SGLANG, Scheduler, CONFIG) is True
    assert Scheduler.__dict__["__poolwatch_setup__"][:2] == (SGLANG, CONFIG)
    assert install(SGLANG, Scheduler, CONFIG) is False
    uninstall(Scheduler)
    assert Scheduler.recv_requests is original
    assert "__poolwatch_setup__" not in Scheduler.__dict__


def test_attach_wraps_one_instance_and_detach_unwraps_it() -> None:
    rank = Rank()
    probe = attach(SGLANG, rank.sched, CONFIG)
    rank.sched.recv_requests()
    rank.sched.process_prefill_chunk()
    assert probe.seq == 1
    detach(rank.sched)
    rank.sched.recv_requests()
    assert probe.seq == 1
    assert probe_of(rank.sched) is None


def test_a_probe_that_raises_inside_a_hook_never_reaches_the_scheduler(installed: type) -> None:
    rank = Rank()
    sched = installed(rank.alloc, rank.rows, rank.tree, max_total_num_tokens=64)
    probe = probe_of(sched)
    assert probe is not None

    def explode(_hook: str) -> None:
        raise RuntimeError("probe bug")

    probe.on_loop_boundary = explode  # type: ignore[method-assign]
    assert sched.recv_requests() == []


class LeakySched(Scheduler):
    def self_check_during_idle(self) -> str:
        raise ValueError("token_to_kv_pool_allocator memory leak detected!")


def test_exceptions_of_the_original_method_still_propagate() -> None:
    install(SGLANG, LeakySched, CONFIG)
    try:
        rank = Rank()
        sched = LeakySched(rank.alloc, rank.rows, rank.tree, max_total_num_tokens=64)
        with pytest.raises(ValueError, match="memory leak"):
            sched.self_check_during_idle()
        probe = probe_of(sched)
        assert probe is not None
        assert probe.latest is not None
    finally:
        uninstall(LeakySched)

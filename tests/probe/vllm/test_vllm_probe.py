"""The vLLM probe on a stand-in block pool (rigs/fakes/vllm.py): exact accounts, the walk's
block ids for each fault, hooks at the step boundaries, shapes per release, the snapshot's wire form."""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace

import pytest

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.conservation import gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Phase, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.lifecycle import activate, attach, detach, install, probe_of, uninstall
from poolwatch.probe.vllm.engine import VLLM, vllm_release
from poolwatch.probe.vllm.extras import VllmProbe
from poolwatch.probe.vllm.shapes import UnknownVllmRelease, shape_for
from rigs.fakes.vllm import Scheduler

CONFIG = ProbeConfig(serve=False, sample_interval_s=0.01)


class Clock:
    def __init__(self) -> None:
        self.now = 1e9  # later than the real clock that stamped the attach sample

    def __call__(self) -> float:
        self.now += 1.0  # every read is a second later: every sample is due
        return self.now


def probe_for(sched: Scheduler, version: str = "0.33.0") -> VllmProbe:
    return new_probe(
        VLLM, sched, CONFIG, release=vllm_release(version), environ={"POOLWATCH_WORKER": "w"}, clock=Clock()
    )


def snap(probe: VllmProbe, *, census: bool = False) -> Snapshot:
    out = probe.sample_now(census=census)
    assert out is not None
    return out


def kinds(s: Snapshot) -> dict[TripwireKind, tuple[int, ...]]:
    return {t.kind: t.slots for t in s.tripwires}


def busy(sched: Scheduler) -> None:
    shared = sched.add("a", 3)
    sched.add("b", 2, prefix=shared[:2])  # a prefix hit: blocks shared by two requests


def test_a_sound_pool_balances_busy_and_idle() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    busy(sched)
    s = snap(probe, census=True)
    account = s.pools[Pool.FULL]
    assert (account.size, account.held, gap(account)) == (63, 5, 0)
    assert s.phase is Phase.BUSY
    assert s.tripwires == ()
    assert s.worker.engine == "vllm"
    assert s.worker.release == "0.33.0"
    sched.finish("a")
    sched.finish("b")
    s = snap(probe, census=True)
    assert s.phase is Phase.IDLE
    assert gap(s.pools[Pool.FULL]) == 0
    assert s.tripwires == ()
    assert probe.census is not None
    assert probe.census["pools"][0]["balanced_ids"] is True


def test_a_premature_free_shows_a_surplus_and_names_the_blocks() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    busy(sched)
    victims = sched.managers[0].req_to_blocks["a"][2:]
    sched.pool.free_blocks(victims)  # freed while "a" still lists them
    s = snap(probe)  # the gap forces the walk at once
    assert gap(s.pools[Pool.FULL]) == -1
    found = kinds(s)
    assert found[TripwireKind.FREE_AND_LIVE] == (victims[0].block_id,)
    assert found[TripwireKind.REF_BELOW_OWNERS] == (victims[0].block_id,)
    assert s.tripwires[0].requests == ("a",)


def test_a_double_free_after_finish_is_invisible_to_the_count_but_named() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    blocks = sched.add("a", 2)
    sched.finish("a")
    sched.pool.free_blocks(blocks)  # the same list again: ref_cnt -1, the blocks stay queued once
    s = snap(probe, census=True)
    assert gap(s.pools[Pool.FULL]) == 0  # the count balances; only the walk sees it
    ids = tuple(sorted(b.block_id for b in blocks))
    assert tuple(sorted(kinds(s)[TripwireKind.NEGATIVE_REF])) == ids


def test_the_free_tripwire_names_a_double_free_at_the_free() -> None:
    sched = Scheduler(64)
    probe = attach(VLLM, sched, CONFIG, release=vllm_release("0.33.0"))
    probe.clock = Clock()
    try:
        blocks = sched.add("a", 2)
        sched.schedule()
        sched.finish("a")
        sched.pool.free_blocks(iter(blocks))  # an iterator, as vLLM's deferred drain passes one
        assert probe.latest is not None
        found = kinds(probe.latest)
        assert tuple(sorted(found[TripwireKind.NEGATIVE_REF])) == tuple(sorted(b.block_id for b in blocks))
        assert probe.latest.tripwires[0].first_seen_hook == "free_blocks"
        assert all(b.ref_cnt == -1 for b in blocks)  # the free itself still ran, untouched
    finally:
        detach(sched)
    assert "free_blocks" not in vars(sched.pool)


def test_a_duplicate_release_in_one_free_is_named_42571() -> None:
    sched = Scheduler(64)
    probe = attach(VLLM, sched, CONFIG, release=vllm_release("0.33.0"))
    probe.clock = Clock()
    try:
        blocks = sched.add("a", 3)
        sched.managers[0].req_to_blocks["a"].append(blocks[1])  # one block listed twice
        s = snap(probe, census=True)
        assert kinds(s)[TripwireKind.REF_BELOW_OWNERS] == (blocks[1].block_id,)
        sched.finish("a")  # the free drives it to -1; the tripwire names it at the free
        assert probe.latest is not None
        assert kinds(probe.latest)[TripwireKind.REF_BELOW_OWNERS] == (blocks[1].block_id,)
        assert blocks[1].ref_cnt == -1
        with pytest.raises(AssertionError):  # vLLM's own assert, later, at an allocation
            sched.pool.get_new_blocks(63)
    finally:
        detach(sched)


def test_a_leak_on_abort_is_a_deficit_naming_the_stale_request() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    blocks = sched.add("a", 3)
    del sched.requests["a"]  # forgotten by the scheduler, its blocks never returned
    sched.running.clear()
    s = snap(probe)
    assert gap(s.pools[Pool.FULL]) == 3
    assert s.phase is Phase.IDLE
    assert kinds(s)[TripwireKind.MISSING] == tuple(b.block_id for b in blocks)
    assert s.tripwires[0].requests == ("a",)


def test_blocks_kept_for_a_transfer_and_deferred_frees_are_owned() -> None:
    sched = Scheduler(64)
    probe = probe_for(sched)
    sched.add("a", 2)
    sched.finish("a", keep_for_transfer=True)
    deferred = sched.add("b", 2)
    sched.managers[0].req_to_blocks.pop("b")
    sched.finish("b")
    sched.deferred_frees.append((5, deferred))
    s = snap(probe, census=True)
    account = s.pools[Pool.FULL]
    assert (account.session_held, account.held, gap(account)) == (2, 2, 0)
    assert s.tripwires == ()


def test_a_cpu_offload_connectors_in_flight_stores_own_the_blocks_they_pin() -> None:
    """SimpleCPUOffload (0.19.1+) touches the GPU blocks a store copies to the host and frees them
    when the worker reports the store done: held by the store, not leaked, and that free is no
    double free -- on the two-pass free of 0.19-0.23 too."""
    sched = Scheduler(64, two_pass=True)
    stores: dict[int, SimpleNamespace] = {}
    manager = SimpleNamespace(_gpu_block_pool=sched.pool, _store_event_to_blocks=stores)
    sched.connector = SimpleNamespace(scheduler_manager=manager)  # type: ignore[attr-defined]
    probe = probe_for(sched, "0.23.0")
    blocks = sched.add("a", 3)
    sched.pool.touch(blocks[:2])
    stores[0] = SimpleNamespace(gpu_block_ids=[b.block_id for b in blocks[:2]])
    sched.finish("a")  # the request goes; the store still reads two of its blocks
    s = snap(probe, census=True)
    assert (s.pools[Pool.FULL].held, gap(s.pools[Pool.FULL]), s.tripwires) == (2, 0, ())
    sched.pool.free_blocks(blocks[:2])  # the store's completion
    stores.clear()
    s = snap(probe, census=True)
    assert (s.pools[Pool.FULL].held, gap(s.pools[Pool.FULL]), s.tripwires) == (0, 0, ())


def test_a_hybrid_pool_counts_every_group() -> None:
    sched = Scheduler(64, groups=2)
    probe = probe_for(sched)
    sched.add("a", 3)
    s = snap(probe, census=True)
    assert s.pools[Pool.FULL].held == 4
    assert gap(s.pools[Pool.FULL]) == 0


def test_the_older_family_reads_without_deferred_frees() -> None:
    sched = Scheduler(32, deferred=False)
    probe = probe_for(sched, "0.11.0")
    busy(sched)
    s = snap(probe, census=True)
    assert gap(s.pools[Pool.FULL]) == 0
    assert "deferred_frees" not in s.queues


def test_the_snapshot_round_trips_with_its_engine() -> None:
    sched = Scheduler(16)
    s = snap(probe_for(sched))
    back = parse_snapshot(dump_snapshot(s))
    assert back.worker.engine == "vllm"
    assert parse_snapshot({**dump_snapshot(s), "worker": {"worker": "w"}}).worker.engine == "sglang"


@pytest.mark.parametrize(
    ("version", "family"),
    [
        ("0.10.2", "v0.10"), ("0.13.0", "v0.10"), ("0.14.0", "v0.14"), ("0.17.1", "v0.14"),
        ("0.18.0", "v0.18"), ("0.23.0", "v0.18"), ("0.24.0", "v0.24"), ("0.25.1", "v0.24"),
        ("0.26.0", "v0.26"), ("0.27.1", "v0.27"), ("0.28.0", "v0.27"), ("0.29.0", "v0.29"),
        ("0.30.0", "v0.30"), ("0.31.0", "v0.31"), ("0.32.0", "v0.31"), ("0.33.0", "v0.33"),
        ("0.34.0", "v0.34"), (" v0.34.0 ", "v0.34"),
    ],
)  # fmt: skip
def test_every_release_read_has_its_family_and_is_verified(version: str, family: str) -> None:
    release = vllm_release(version)
    assert (release.family, release.verified) == (family, True)


@pytest.mark.parametrize(
    ("version", "family"),
    [("0.34.1", "v0.34"), ("0.35.0", "v0.34"), ("1.0.0", "v0.34"), ("0.25.2", "v0.24"), ("0.13.1", "v0.10")],
)
def test_a_release_never_read_is_read_as_the_family_before_it_unverified(version: str, family: str) -> None:
    release = vllm_release(version)
    assert (release.family, release.verified) == (family, False)


@pytest.mark.parametrize(
    ("version", "family"),
    [
        ("0.34.0rc1", "v0.34"), ("0.33.0.dev12+g1a2b3c4", "v0.33"), ("0.33.0+cu128", "v0.33"),
        ("0.33.0+cpu", "v0.33"), ("0.34.0.post1", "v0.34"), ("0.34.0a2", "v0.34"), ("0.11.0.1", "v0.10"),
    ],
)  # fmt: skip
def test_a_pre_release_dev_or_local_build_of_a_release_read_is_unverified(version: str, family: str) -> None:
    """Its code may differ from the final release's anywhere (issue 42: a ``0.34.0rc1`` whose free
    came before its pop was read as 0.34.0, guard on, and refused every healthy free)."""
    release = vllm_release(version)
    assert (release.family, release.verified) == (family, False)


@pytest.mark.parametrize(
    ("override", "installed", "family", "verified"),
    [
        ("0.34.0", "0.35.0", "v0.34", False),  # an override never marks an unread release read
        ("0.34.0", "0.34.0rc1", "v0.34", False),
        ("0.33.0", "0.34.0", "v0.33", False),  # read as another family: not what was read
        ("0.34.0", "0.34.0", "v0.34", True),
        ("", "0.34.0", "v0.34", True),
        ("0.34.0", "", "v0.34", True),  # vLLM not installed (fakes): the override is all there is
    ],
)
def test_an_override_chooses_the_family_never_that_the_release_was_read(
    override: str, installed: str, family: str, verified: bool
) -> None:
    release = vllm_release(override, installed=installed)
    assert (release.family, release.verified) == (family, verified)
    assert release.version == (installed or override)


@pytest.mark.parametrize("override", ["0.34.0 junk", "nightly", "0.34.0; rm -rf /", "x" * 300])
def test_an_override_that_is_no_release_number_is_refused_clearly(override: str) -> None:
    with pytest.raises(UnknownVllmRelease, match=r"POOLWATCH_ENGINE_VERSION=.* is not a release number"):
        vllm_release(override, installed="0.34.0")


@pytest.mark.parametrize("version", ["0.9.2", "0.10.1.1", "nightly", ""])
def test_a_release_older_than_the_first_read_or_no_version_is_refused_clearly(version: str) -> None:
    with pytest.raises(UnknownVllmRelease, match="not a release poolwatch can read"):
        vllm_release("", installed=version)
    with pytest.raises(UnknownVllmRelease, match=r"the first is 0\.10\.2"):
        shape_for(version)


def test_hooks_run_at_step_boundaries_and_at_idle() -> None:
    install(VLLM, Scheduler, CONFIG, release=vllm_release("0.33.0"))
    try:
        sched = Scheduler(32)
        probe = probe_of(sched)
        assert probe is not None
        # sampled at birth: a snapshot to serve before the first request
        assert probe.latest is not None
        assert probe.latest.phase is Phase.IDLE
        probe.clock = Clock()
        busy(sched)
        sched.schedule()
        assert probe.seq == 1
        assert probe.latest.phase is Phase.BUSY
        sched.finish_requests(["a", "b"])
        assert probe.latest.phase is Phase.IDLE
        assert probe.census is not None
        assert not install(VLLM, Scheduler, CONFIG, release=vllm_release("0.33.0"))
    finally:
        uninstall(Scheduler)
    assert probe_of(Scheduler(8)) is None


def test_attach_wraps_one_instance_and_detach_undoes_it() -> None:
    sched = Scheduler(16)
    probe = attach(VLLM, sched, CONFIG, release=vllm_release("0.33.0"))
    assert probe.latest is not None
    assert probe.latest.phase is Phase.IDLE
    probe.clock = Clock()
    sched.schedule()
    assert probe.seq == 1
    detach(sched)
    assert probe_of(sched) is None
    assert "schedule" not in vars(sched)


FAKE = replace(VLLM, scheduler="rigs.fakes.vllm:Scheduler")  # the fakes' class, as vLLM's


def test_the_plugin_is_inert_without_consent() -> None:
    assert not VLLM.consent({})
    assert not VLLM.consent({"POOLWATCH_PROBE": "0"})
    assert not VLLM.consent({"VLLM_PLUGINS": "poolwatch"})  # that list selects the other plugins too
    assert VLLM.consent({"POOLWATCH_PROBE": "1"})


def test_activation_refuses_an_unknown_release(caplog: pytest.LogCaptureFixture) -> None:
    env = {"POOLWATCH_ENGINE_VERSION": "0.9.2"}
    with caplog.at_level(logging.ERROR, logger="poolwatch.probe"):
        assert not activate(FAKE, env)
    assert "not a release poolwatch can read" in caplog.text
    assert "__poolwatch_originals__" not in vars(Scheduler)
    assert not activate(FAKE, {"POOLWATCH_PROBE_DISABLE": "1"})


def test_activation_installs_on_a_known_release() -> None:
    assert activate(FAKE, {"POOLWATCH_ENGINE_VERSION": "0.33.0"})
    try:
        assert "__poolwatch_originals__" in vars(Scheduler)
    finally:
        uninstall(Scheduler)


def test_the_former_release_variable_still_reads_with_a_deprecation_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="poolwatch.probe"):
        assert activate(FAKE, {"POOLWATCH_VLLM_VERSION": "0.33.0", "POOLWATCH_SGLANG_VERSION": "0.12.0"})
    try:
        assert "__poolwatch_originals__" in vars(Scheduler)  # SGLang's variable never steers vLLM
        assert "POOLWATCH_VLLM_VERSION is deprecated" in caplog.text
    finally:
        uninstall(Scheduler)


def test_an_idle_snapshot_is_restamped_not_left_to_go_stale() -> None:
    sched = Scheduler(16)
    wall = iter(float(t) for t in range(100, 200))
    probe = new_probe(
        VLLM, sched, CONFIG, release=vllm_release("0.33.0"), clock=Clock(), wall=lambda: next(wall)
    )
    assert not probe.refresh_idle()  # nothing published yet
    first = snap(probe)
    assert first.phase is Phase.IDLE
    assert probe.refresh_idle()
    assert probe.latest is not None
    assert probe.latest.taken_at > first.taken_at
    assert probe.latest.seq == first.seq
    sched.add("a", 2)
    busy = snap(probe)
    assert busy.phase is Phase.BUSY
    assert not probe.refresh_idle()  # a busy snapshot is never re-stamped
    assert probe.latest is busy

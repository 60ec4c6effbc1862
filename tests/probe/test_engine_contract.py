"""The one contract every engine passes: SGLang's and vLLM's rooms, and a reference toy engine
(:mod:`rigs.fakes.toy`: a third engine as a sibling folder).  Each is driven through its own
stand-in scheduler (:mod:`rigs.fakes.drivers`); nothing here names an engine."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.conservation import gap
from poolwatch.engines import ENGINES, load
from poolwatch.model.rank import Phase, Pool
from poolwatch.probe.census.report import CENSUS_SCHEMA
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.hooks import ORIGINALS, hook_names
from poolwatch.probe.core.kill_switch import HEARTBEAT_S
from poolwatch.probe.core.post_import import _PostImport
from poolwatch.probe.core.probe import Probe
from poolwatch.probe.core.schedule import GAP_CENSUS_EVERY_S
from poolwatch.probe.lifecycle import activate, attach, detach, install, probe_of, uninstall
from rigs.fakes.clock import FakeClock
from rigs.fakes.drivers import DRIVERS, REGISTRY, Driver

NAMES = [entry.name for entry in REGISTRY]
# every sample due (0.01 s at most; unpaced: a sample's real cost must not space out the fake
# clock's samples), censuses only when triggered (an hour's intervals)
QUIET = ProbeConfig(
    serve=False,
    sample_interval_s=0.01,
    sample_budget=0.0,
    census_interval_s=3600.0,
    kv_census_interval_s=3600.0,
    directory="/nonexistent-poolwatch-contract",
)


def test_the_contract_covers_every_registered_engine_and_the_reference_one() -> None:
    assert set(DRIVERS) == set(NAMES)
    for entry in REGISTRY:
        assert load(entry.probe).name == entry.name
        assert load(entry.probe) is DRIVERS[entry.name].spec


@pytest.fixture(params=NAMES)
def driver(request: pytest.FixtureRequest) -> Driver:
    return DRIVERS[request.param]


@pytest.fixture
def cls(driver: Driver) -> Iterator[type]:
    """A fresh subclass of the stand-in scheduler, so installing it touches no other test."""
    fresh = type(f"Fresh{driver.cls.__name__}", (driver.cls,), {})
    yield fresh
    uninstall(fresh)


def config_of(driver: Driver, base: ProbeConfig = QUIET) -> ProbeConfig:
    return replace(base, release=driver.release)


def attached(driver: Driver, sched: Any, clock: FakeClock, **changes: Any) -> Probe:
    config = replace(config_of(driver), **changes)
    return attach(driver.spec, sched, config, serve=False, clock=clock, wall=clock)


# --- install, uninstall, attach, detach ----------------------------------------------------------


def test_install_is_idempotent_and_every_instance_is_born_with_a_probe(driver: Driver, cls: type) -> None:
    assert install(driver.spec, cls, config_of(driver)) is True
    wrapped = {name: cls.__dict__[name] for name in hook_names(cls, driver.spec.hooks)}
    assert install(driver.spec, cls, config_of(driver)) is False
    assert {name: cls.__dict__[name] for name in wrapped} == wrapped  # not wrapped twice
    sched = driver.new(cls)
    probe = probe_of(sched)
    assert probe is not None
    assert probe.engine is driver.spec
    driver.loop(sched)
    assert probe.seq >= 1


def test_uninstall_restores_the_class_exactly(driver: Driver, cls: type) -> None:
    before = dict(cls.__dict__)
    install(driver.spec, cls, config_of(driver))
    uninstall(cls)
    assert dict(cls.__dict__) == before
    assert probe_of(driver.new(cls)) is None


def test_attach_wraps_one_instance_and_detach_undoes_it(driver: Driver) -> None:
    sched = driver.new(driver.cls)
    before = set(vars(sched))
    probe = attached(driver, sched, FakeClock())
    assert attach(driver.spec, sched, config_of(driver), serve=False) is probe  # one probe per scheduler
    driver.loop(sched)
    assert probe.seq >= 1
    assert probe.latest is not None
    detach(sched)
    assert probe_of(sched) is None
    assert set(vars(sched)) == before
    assert ORIGINALS not in vars(driver.cls)


# --- never raise into the engine ------------------------------------------------------------------


class _Broken:
    def __get__(self, obj: object, owner: type | None = None) -> Any:
        raise RuntimeError("half-built: this property raises")


def _nothing(self: object, *args: Any, **kwargs: Any) -> None:
    return None


def hostile(driver: Driver) -> Any:
    """An instance of the stand-in whose every field is missing or raises; its hooked methods do
    nothing of their own, so any exception would be the probe's."""
    methods = {n for names, _, _ in driver.spec.hooks for n in names}
    fields = {n for n in dir(driver.cls) if not n.startswith("__") and n not in methods}
    body = dict.fromkeys(fields, _Broken()) | dict.fromkeys(methods, _nothing)
    return object.__new__(type("Broken", (driver.cls,), body))  # __init__ never ran: no attribute either


def test_a_half_built_scheduler_never_sees_an_exception_and_the_probe_counts_it(driver: Driver) -> None:
    sched = hostile(driver)
    probe = attached(driver, sched, FakeClock())
    for names, _, _ in driver.spec.hooks:
        for name in names:
            for _ in range(3):
                getattr(sched, name)()
    assert probe.guard.errors_total > 0
    detach(sched)


def test_a_hook_never_raises_whatever_the_probe_does(driver: Driver) -> None:
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, FakeClock())
    probe.reader = None  # type: ignore[assignment]  # every read now fails inside the probe
    for _ in range(20):
        driver.loop(sched)
    assert probe.guard.errors_total > 0
    detach(sched)


# --- the kill switch and its heartbeat ------------------------------------------------------------


def test_while_disabled_nothing_is_read_and_a_heartbeat_keeps_the_switch_visible(driver: Driver) -> None:
    clock = FakeClock()
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, clock)
    driver.work(sched, 2)
    probe.disable()
    samples = probe.guard.samples_total
    clock.advance(HEARTBEAT_S)
    driver.loop(sched)
    snap = probe.latest
    assert snap is not None
    assert snap.pools == {}
    assert snap.phase is Phase.UNKNOWN
    assert snap.probe is not None
    assert snap.probe.disabled
    assert snap.worker.engine == driver.spec.name
    assert probe.guard.samples_total == samples  # nothing read
    first = snap.taken_at
    clock.advance(HEARTBEAT_S)
    driver.loop(sched)
    assert probe.latest is not None
    assert probe.latest.taken_at > first
    probe.enable()
    clock.advance(1.0)
    driver.loop(sched)
    assert probe.latest is not None
    assert probe.latest.pools
    detach(sched)


# --- keepalive: an engine that calls no hook while idle --------------------------------------------


def test_an_idle_snapshot_is_restamped_exactly_where_the_engine_calls_no_hook_while_idle(
    driver: Driver,
) -> None:
    clock = FakeClock()
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, clock)
    driver.work(sched, 1)
    driver.finish(sched)
    snap = probe.latest
    assert snap is not None
    assert snap.phase is Phase.IDLE
    clock.advance(5.0)
    assert probe.refresh_idle() is True  # the mechanism is every engine's ...
    assert probe.latest is not None
    assert probe.latest.taken_at > snap.taken_at
    detach(sched)


def test_the_endpoint_runs_a_keepalive_thread_only_for_an_engine_that_needs_one(
    driver: Driver, tmp_path: Path
) -> None:
    sched = driver.new(driver.cls)
    config = replace(config_of(driver), directory=str(tmp_path), worker="w", serve=True)
    probe = attach(driver.spec, sched, config)  # ... but only such an engine's endpoint runs it
    try:
        assert probe.publisher is not None
        assert (probe.publisher._thread is not None) is driver.spec.keepalive
    finally:
        detach(sched)


# --- censuses: the envelope, and the rate limit during a growing leak -------------------------------


def test_a_census_is_served_in_the_one_envelope(driver: Driver) -> None:
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, FakeClock())
    driver.work(sched, 2)
    probe.sample_now(census=True)
    doc = probe.census
    assert doc is not None
    assert doc["schema"] == CENSUS_SCHEMA
    assert doc["seq"] == probe.seq
    assert doc["phase"] == "busy"
    assert doc["pools"]
    assert all(body["balanced_ids"] is True for body in doc["pools"])
    detach(sched)


def test_a_growing_leak_gets_at_most_one_gap_census_per_interval(driver: Driver) -> None:
    clock = FakeClock()
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, clock)
    driver.work(sched, 2)
    before = probe.census_total
    seconds, step = 10.0, 0.1
    gaps = set()
    for _ in range(round(seconds / step)):
        driver.leak(sched, 1)
        clock.advance(step)
        driver.loop(sched)
        assert probe.latest is not None
        gaps.add(gap(probe.latest.pools[Pool.FULL]))
    assert len(gaps) > 50  # the leak grew at (nearly) every sample
    ran = probe.census_total - before
    assert 1 <= ran <= 1 + math.floor(seconds / GAP_CENSUS_EVERY_S)
    assert probe.schedule.gap_runs == ran
    detach(sched)


# --- the snapshot on the wire ------------------------------------------------------------------------


def test_the_snapshot_round_trips_with_its_engine_and_release(driver: Driver) -> None:
    sched = driver.new(driver.cls)
    probe = attached(driver, sched, FakeClock(), worker="w-0")
    driver.work(sched, 1)
    snap = probe.sample_now()
    assert snap is not None
    back = parse_snapshot(dump_snapshot(snap))
    assert back == snap
    assert back.worker.engine == driver.spec.name
    assert back.worker.release == driver.release
    assert back.worker.worker == "w-0"
    detach(sched)


# --- activation: the post-import hook, consent, and no torch at import --------------------------------


@pytest.fixture
def fake_module(tmp_path: Path, driver: Driver) -> Iterator[str]:
    """A throwaway module whose scheduler class is the driver's stand-in (importable once)."""
    name = f"fake_engine_{id(tmp_path)}"
    module, _, cls = f"{driver.cls.__module__}:{driver.cls.__qualname__}".partition(":")
    (tmp_path / f"{name}.py").write_text(
        f"from {module} import {cls} as _Base\n\nclass Scheduler(_Base):\n    pass\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    imported = sys.modules.pop(name, None)
    if imported is not None:
        uninstall(imported.Scheduler)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PostImport)]


def test_activation_wraps_the_scheduler_class_when_its_module_is_first_imported(
    driver: Driver, fake_module: str
) -> None:
    spec = replace(driver.spec, scheduler=f"{fake_module}:Scheduler")
    env = {"POOLWATCH_PROBE_SERVE": "0", "POOLWATCH_ENGINE_VERSION": driver.release}
    assert activate(spec, env) is True
    assert activate(spec, env) is True  # armed twice: one hook
    assert sum(isinstance(f, _PostImport) for f in sys.meta_path) == 1
    module = __import__(fake_module)
    assert not any(isinstance(f, _PostImport) for f in sys.meta_path)  # one-shot
    sched = driver.new(module.Scheduler)
    probe = probe_of(sched)
    assert probe is not None
    assert not probe.config.serve
    assert probe.release.version == driver.release


@pytest.mark.parametrize(
    "env", [{"POOLWATCH_PROBE_DISABLE": "1"}, {"POOLWATCH_PROBE_PORT_BASE": "not-a-port"}]
)
def test_the_kill_switch_and_a_bad_setting_leave_the_engine_untouched(
    driver: Driver, fake_module: str, env: dict[str, str]
) -> None:
    spec = replace(driver.spec, scheduler=f"{fake_module}:Scheduler")
    assert activate(spec, {**env, "POOLWATCH_ENGINE_VERSION": driver.release}) is False
    module = __import__(fake_module)
    assert ORIGINALS not in module.Scheduler.__dict__


def test_being_installed_is_not_consent(driver: Driver) -> None:
    assert driver.spec.consent({}) is False
    assert driver.spec.consent({"POOLWATCH_PROBE": "1"}) is True


@pytest.mark.parametrize("name", NAMES)
def test_activation_imports_no_torch(name: str) -> None:
    entry = next(e for e in REGISTRY if e.name == name)
    code = (
        "import sys\n"
        "from poolwatch.engines import load\n"
        "from poolwatch.probe import lifecycle\n"
        f"spec = load({entry.probe!r})\n"
        "lifecycle.activate(spec, {'POOLWATCH_PROBE_SERVE': '0', 'POOLWATCH_ENGINE_VERSION': "
        f"{DRIVERS[name].release!r}}})\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.stdout.strip() == "False"


# --- the .pth line: every engine, nothing without consent ---------------------------------------------

PTH = Path(__file__).resolve().parents[2] / "service" / "poolwatch" / "probe" / "poolwatch-probe.pth"


def run_pth(env_extra: dict[str, str]) -> list[str]:
    code = (
        "import sys\n"
        f"exec(open({str(PTH)!r}).read())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('poolwatch', 'torch'))))\n"
        "print(sorted(f.name for f in sys.meta_path if type(f).__name__ == '_PostImport'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLWATCH")} | env_extra
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.splitlines()


def test_the_pth_line_imports_nothing_without_poolwatch_probe() -> None:
    assert run_pth({}) == ["[]", "[]"]


def test_the_pth_line_arms_every_shipped_engine_and_imports_no_torch() -> None:
    modules, armed = run_pth({"POOLWATCH_PROBE": "1"})
    assert "torch" not in modules
    wanted = sorted(load(e.probe).scheduler.partition(":")[0] for e in ENGINES if e.probe)
    assert armed == repr(wanted).replace('"', "'")

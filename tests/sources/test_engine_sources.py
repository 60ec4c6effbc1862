"""The sidecar reads an engine without a probe through that engine's sources room, found by engine
name or by source kind in the registry; nothing neutral names an engine (pyproject's contracts)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from poolwatch.engines import ENGINES, EngineEntry, UnknownEngine, engine_names
from poolwatch.model.rank import SourceKind
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Source, Target
from poolwatch.sources.engine import (
    EngineSources,
    engine_sources,
    sniff_engine,
    source_kinds,
    sources_for,
    sources_of,
)
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.target_config import static_targets
from poolwatch.sources.targets import make_source
from rigs.fakes.clock import FakeClock

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"


def test_every_engine_kind_belongs_to_exactly_one_room_and_names_it() -> None:
    rooms = engine_sources()
    assert {r.engine for r in rooms} <= set(engine_names())
    for kind in source_kinds():
        owners = [r.engine for r in rooms if kind in r.kinds]
        if kind.channel in ("probe", "file"):
            assert owners == []
            assert kind.engine == ""
        else:
            assert owners == [kind.engine], kind


def test_the_kinds_are_the_registrys_without_loading_a_room() -> None:
    shipped = [SourceKind(f"{e.name}-{c}") for e in ENGINES for c in ("metrics", "log") if c in e.channels]
    assert source_kinds() == (SourceKind.PROBE, *shipped, SourceKind.FILE)
    assert {"sglang-metrics", "sglang-log", "vllm-metrics", "vllm-log"} <= set(source_kinds())
    log_only = EngineEntry(
        "toy", "Toy", probe="rigs.fakes.toy.engine:TOY", sources="tests.no.such:ROOM", channels=("log",)
    )
    assert source_kinds((log_only,)) == (SourceKind.PROBE, SourceKind("toy-log"), SourceKind.FILE)


@pytest.mark.parametrize("room", engine_sources(), ids=lambda r: r.engine)
def test_a_rooms_kinds_are_built_by_that_room(room: EngineSources) -> None:
    clock = FakeClock()
    settings = Settings.from_env({})
    for kind in room.kinds:
        where = "/logs/w.log" if kind == room.log else "http://127.0.0.1:30000"
        source = make_source(Target(f"{kind}:{where}", kind, where, "w"), settings, clock)
        assert source.target.source == kind
        assert sources_for(kind) is room


@pytest.mark.parametrize("room", engine_sources(), ids=lambda r: r.engine)
def test_every_rooms_log_source_fits_the_source_protocol(
    room: EngineSources, log_source: Callable[..., LogSource], tmp_path: Path
) -> None:
    log = tmp_path / "w.log"
    log.write_text("")
    assert isinstance(log_source(room.log_dialect, log, FakeClock()), Source)


def test_the_engine_setting_picks_whose_metrics_and_logs_the_flags_name() -> None:
    env = {"POOLWATCH_METRICS_URLS": "http://127.0.0.1:30000", "POOLWATCH_LOG_PATHS": "/logs/a.log"}
    kinds = [t.source for t in static_targets(Settings.from_env(env))]
    assert kinds == [SourceKind("sglang-metrics"), SourceKind("sglang-log")]  # the default engine


def test_an_engine_without_a_sources_room_is_one_clear_error() -> None:
    probe_only = (EngineEntry("toy", "Toy", probe="rigs.fakes.toy.engine:TOY"),)
    with pytest.raises(UnknownEngine, match="engine 'toy' has no /metrics or log source"):
        sources_of("toy", probe_only)
    assert sources_for(SourceKind("sglang-metrics"), probe_only) is None


def test_an_unknown_engine_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownEngine, match=re.escape(f"(known: {', '.join(engine_names())})")):
        sources_of("tgi")


def test_a_log_is_told_by_its_lines_and_noise_is_nobodys() -> None:
    sglang = (CORPUS / "v0.5.12-swa-busy-check.log").read_text().splitlines()
    noise = (CORPUS / "no-sglang-lines.txt").read_text().splitlines()
    found = sniff_engine(sglang)
    assert found is not None
    assert found[0].engine == "sglang"
    assert found[1].strong > 0  # the evidence: lines only SGLang writes
    assert sniff_engine(noise) is None
    assert sniff_engine([]) is None

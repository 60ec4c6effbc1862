from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from poolwatch.discovery.entry import DiscoveryEntry, write_discovery
from poolwatch.discovery.safety import default_directory
from poolwatch.errors import ConfigError
from poolwatch.model.rank import Role
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.base import Target
from poolwatch.sources.logfile.source import LogSource
from poolwatch.sources.probe_source import ProbeSource
from poolwatch.sources.sglang.metrics import SglangMetricsSource
from poolwatch.sources.target_config import load_targets_file, parse_targets_document, static_targets
from poolwatch.sources.targets import TargetSet, discover_probes
from rigs.fakes.clock import FakeClock


def settings(**env: str) -> Settings:
    return Settings.from_env({f"POOLWATCH_{k.upper()}": v for k, v in env.items()})


def entry(worker: str = "prefill-0", tp: int = 0, port: int = 41234, boot: str = "b1") -> DiscoveryEntry:
    return DiscoveryEntry(f"http://127.0.0.1:{port}", 4242, worker, 0, tp, 0, boot, 1767000000.0)


def test_a_targets_file_lists_every_kind_of_target(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "targets:\n"
        "  - {name: prefill-0, source: sglang-metrics, url: 'http://prefill-0:30000', role: prefill}\n"
        "  - {name: decode-0-log, source: sglang-log, path: /logs/decode-0.log, worker: decode-0}\n"
        "  - {source: probe, url: 'http://10.0.0.9:41234', labels: {zone: a}}\n"
    )
    assert load_targets_file(str(path)) == [
        Target("prefill-0", "sglang-metrics", "http://prefill-0:30000", "prefill-0:30000", Role.PREFILL),
        Target("decode-0-log", "sglang-log", "/logs/decode-0.log", "decode-0"),
        Target("probe:http://10.0.0.9:41234", "probe", "http://10.0.0.9:41234", labels={"zone": "a"}),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a mapping with a 'targets' list"),
        ("targets: 3", "expected a mapping with a 'targets' list"),
        ("targets: [3]", "targets[0]: expected a mapping, got int"),
        ("targets: [{source: nope, url: x}]", "targets[0].source: expected one of probe, sglang-metrics"),
        ("targets: [{source: probe}]", "targets[0].url: expected a non-empty string"),
        ("targets: [{source: sglang-log, url: x}]", "targets[0].path: expected a non-empty string"),
        ("targets: [{source: probe, url: x, role: boss}]", "targets[0].role: expected one of prefill"),
        (
            "targets: [{source: probe, url: x, labels: [a]}]",
            "targets[0].labels: expected a mapping of strings",
        ),
        (
            "targets: [{source: probe, url: 'http://u:pw@h:1/x'}, {source: probe, url: 'http://u:pw@h:1/x'}]",
            "the probe target 'probe:http://h:1' is listed twice",
        ),
        (
            "targets: [{name: a, source: probe, url: x}, {name: a, source: probe, url: y}]",
            "'a' is used twice",
        ),
        ("targets: [{source: probe, url: x\n", "is not valid YAML"),
    ],
)
def test_a_bad_targets_file_is_one_clear_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_targets_file(str(path))
    assert "\n" not in str(err.value)


def test_a_missing_targets_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_targets_file(str(tmp_path / "absent.yaml"))


def test_several_flag_servers_are_named_after_their_locations_so_ranks_never_collide() -> None:
    s = settings(
        metrics_urls="http://a:30000,http://b:30000",
        probe_urls="http://p:1",
        worker="pod-1",
        role="decode",
        namespace="llm",
    )
    ns = {"namespace": "llm"}
    assert static_targets(s) == [
        Target("probe:http://p:1", "probe", "http://p:1", "", Role.DECODE, ns),  # the probe names itself
        Target(
            "sglang-metrics:http://a:30000", "sglang-metrics", "http://a:30000", "a:30000", Role.DECODE, ns
        ),
        Target(
            "sglang-metrics:http://b:30000", "sglang-metrics", "http://b:30000", "b:30000", Role.DECODE, ns
        ),
    ]


def test_a_log_beside_several_flag_servers_is_refused_because_its_worker_cannot_be_told() -> None:
    s = settings(metrics_urls="http://a:30000,http://b:30000", log_paths="/logs/a.log", worker="pod-1")
    with pytest.raises(ConfigError, match=r"POOLWATCH_LOG_PATHS: .*POOLWATCH_TARGETS_FILE"):
        static_targets(s)


def test_the_pods_probe_metrics_and_log_all_carry_the_pods_worker_whatever_the_log_is_called() -> None:
    s = settings(
        probe_dir="/var/run/poolwatch",
        metrics_urls="http://127.0.0.1:30000",
        log_paths="/var/log/sglang/sglang.log",
        probe_urls="http://127.0.0.1:41234",
        worker="decode-7f9c",
    )
    assert {t.worker for t in static_targets(s)} == {"decode-7f9c"}


def test_a_log_in_a_targets_file_must_name_its_worker() -> None:
    doc = {"targets": [{"source": "sglang-log", "path": "/logs/sglang.log"}]}
    with pytest.raises(
        ConfigError, match=re.escape("targets[0].worker: a sglang-log target needs the worker")
    ):
        parse_targets_document(doc, "t.yaml")


def test_a_server_and_its_log_in_a_targets_file_name_one_worker() -> None:
    doc = {
        "targets": [
            {"name": "m", "source": "sglang-metrics", "url": "http://10.0.0.7:30000", "worker": "prefill-0"},
            {"name": "l", "source": "sglang-log", "path": "/logs/whatever.log", "worker": "prefill-0"},
        ]
    }
    assert [t.worker for t in parse_targets_document(doc, "t.yaml")] == ["prefill-0", "prefill-0"]


def test_a_lone_target_is_the_pods_own_sglang_and_carries_the_pods_name() -> None:
    (target,) = static_targets(settings(log_paths="/logs/sglang.log", worker="pod-1", role="prefill"))
    assert (target.worker, target.role) == ("pod-1", Role.PREFILL)


def test_each_kind_of_target_gets_its_source(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    s = settings(probe_urls="http://p:1", metrics_urls="http://m:2", log_paths=str(log), worker="w")
    kinds = [type(src) for src in TargetSet(s, FakeClock()).current()]
    assert kinds == [ProbeSource, SglangMetricsSource, LogSource]


def test_probes_in_the_discovery_directory_are_found(tmp_path: Path) -> None:
    write_discovery(tmp_path, entry(tp=0))
    write_discovery(tmp_path, entry(tp=1, port=41235))
    (tmp_path / "junk.json").write_text("{not json")
    assert discover_probes(str(tmp_path)) == [
        ("probe:prefill-0/dp0-tp0-pp0", "http://127.0.0.1:41234", "prefill-0"),
        ("probe:prefill-0/dp0-tp1-pp0", "http://127.0.0.1:41235", "prefill-0"),
    ]
    assert discover_probes(str(tmp_path / "absent")) == []


def test_the_discovery_directory_is_reread_every_cycle(tmp_path: Path) -> None:
    targets = TargetSet(settings(probe_dir=str(tmp_path), worker="pod-1", role="prefill"), FakeClock())
    assert targets.current() == []
    first = write_discovery(tmp_path, entry(tp=0))
    (source,) = targets.current()
    assert source.target == Target(
        "probe:prefill-0/dp0-tp0-pp0", "probe", "http://127.0.0.1:41234", "prefill-0", Role.PREFILL
    )
    write_discovery(tmp_path, entry(tp=1, port=41235))
    again, _second = targets.current()
    assert again is source  # unchanged target, same source object
    write_discovery(tmp_path, entry(tp=0, port=50000, boot="b2"))  # the rank restarted on a new port
    moved, _ = targets.current()
    assert moved is not source
    assert moved.target.location == "http://127.0.0.1:50000"
    first.unlink()
    assert [s.target.name for s in targets.current()] == ["probe:prefill-0/dp0-tp1-pp0"]


def test_with_nothing_configured_the_sidecar_watches_the_default_discovery_directory() -> None:
    assert TargetSet(settings(worker="w"), FakeClock()).probe_dir == default_directory(os.environ)
    assert TargetSet(settings(worker="w", metrics_urls="http://m:1"), FakeClock()).probe_dir == ""


def test_the_documented_yaml_example_parses() -> None:
    import yaml

    doc = yaml.safe_load(
        "targets:\n"
        "  - {name: prefill-0, source: sglang-metrics, url: http://prefill-0:30000, role: prefill}\n"
        "  - {name: decode-0-log, source: sglang-log, path: /logs/decode-0.log, worker: decode-0}\n"
    )
    assert [t.name for t in parse_targets_document(doc, "example")] == ["prefill-0", "decode-0-log"]


def test_a_sidecar_given_probe_workers_follows_only_those_workers_probes(tmp_path: Path) -> None:
    write_discovery(tmp_path, entry(worker="prefill-0", tp=0))
    write_discovery(tmp_path, entry(worker="prefill-1", tp=0, port=41235))
    write_discovery(tmp_path, entry(worker="decode-0", tp=0, port=41236))
    mine = TargetSet(settings(probe_dir=str(tmp_path), probe_workers="prefill-1"), FakeClock())
    assert [s.target.worker for s in mine.current()] == ["prefill-1"]
    several = TargetSet(settings(probe_dir=str(tmp_path), probe_workers="prefill-0, decode-0"), FakeClock())
    assert sorted(s.target.worker for s in several.current()) == ["decode-0", "prefill-0"]
    everyone = TargetSet(settings(probe_dir=str(tmp_path)), FakeClock())
    assert len(everyone.current()) == 3

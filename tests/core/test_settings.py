from __future__ import annotations

import pytest

from poolwatch.cli import build_parser
from poolwatch.codec.schema import MAX_LISTED, MAX_QUEUES
from poolwatch.detect.config import DetectorConfig
from poolwatch.discovery.files import MAX_FILE_BYTES, MAX_FILES
from poolwatch.engines import read_engines
from poolwatch.errors import ConfigError
from poolwatch.limits import DEFAULT_LIMITS, Limits
from poolwatch.model.rank import Role
from poolwatch.settings.sidecar import Settings, from_args
from poolwatch.sources.prom_text import MAX_SAMPLES
from poolwatch.sources.sglang.metrics import MAX_RANKS

READ = ", ".join(read_engines())  # the engines whose /metrics or log the sidecar reads


def test_defaults_need_no_environment() -> None:
    s = Settings.from_env({"POD_NAME": "decode-1"})
    assert (s.server.port, s.scrape.scrape_interval, s.identity.worker) == (9464, 1.0, "decode-1")
    assert s.alerting.tls_verify is True


def test_environment_sets_every_group() -> None:
    s = Settings.from_env(
        {
            "POOLWATCH_PORT": "9000",
            "POOLWATCH_SCRAPE_INTERVAL": "0.5",
            "POOLWATCH_LOG_PATHS": "/logs/a.log, /logs/b.log,",
            "POOLWATCH_ROLE": "prefill",
            "POOLWATCH_WORKER": "p-0",
            "POOLWATCH_TLS_VERIFY": "false",
            "UNRELATED": "x",
        }
    )
    assert s.server.port == 9000
    assert s.scrape.scrape_interval == 0.5
    assert s.targets.log_paths == ("/logs/a.log", "/logs/b.log")
    assert (s.identity.role, s.identity.worker) == (Role.PREFILL, "p-0")
    assert s.alerting.tls_verify is False


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POOLWATCH_PORT": "http"}, "POOLWATCH_PORT: expected an integer, got 'http'"),
        ({"POOLWATCH_PORT": "70000"}, "POOLWATCH_PORT: must be at most 65535"),
        ({"POOLWATCH_SCRAPE_INTERVAL": "0"}, "POOLWATCH_SCRAPE_INTERVAL: expected a number > 0"),
        ({"POOLWATCH_SCRAPE_TIMEOUT": "nan"}, "POOLWATCH_SCRAPE_TIMEOUT: expected a number > 0"),
        ({"POOLWATCH_ROLE": "router"}, "POOLWATCH_ROLE: expected one of prefill, decode, unified"),
        ({"POOLWATCH_ENGINE": "tgi"}, f"POOLWATCH_ENGINE: expected one of {READ}, got 'tgi'"),
        ({"POOLWATCH_TLS_VERIFY": "maybe"}, "POOLWATCH_TLS_VERIFY: expected true or false"),
        ({"POOLWATCH_HISTORY": "0"}, "POOLWATCH_HISTORY: must be at least 1"),
        ({"POOLWATCH_LOG_LEVEL": "loud"}, "POOLWATCH_LOG_LEVEL: expected debug, info"),
        ({"POOLWATCH_RESOLVE_SAMPLES": "0"}, "POOLWATCH_RESOLVE_SAMPLES: must be at least 1"),
        ({"POOLWATCH_LARGE_LEAK_FRACTION": "2"}, "POOLWATCH_LARGE_LEAK_FRACTION: must be in"),
        ({"POOLWATCH_MAX_BODY_BYTES": str(2 << 30)}, "POOLWATCH_MAX_BODY_BYTES: must be at most 1073741824"),
        ({"POOLWATCH_MAX_QUEUES": "0"}, r"POOLWATCH_MAX_QUEUES: must be within 1\.\.4096, got 0"),
        ({"POOLWATCH_MAX_PAGE_RANKS": "1e9"}, "POOLWATCH_MAX_PAGE_RANKS: expected an integer"),
        ({"POOLWATCH_MAX_DISCOVERY_FILE_BYTES": "512"}, "POOLWATCH_MAX_DISCOVERY_FILE_BYTES: must be within"),
        ({"POOLWATCH_MAX_DISCOVERY_FILES": "-1"}, "POOLWATCH_MAX_DISCOVERY_FILES: must be within"),
        ({"POOLWATCH_MAX_PAGE_SAMPLES": str(10**8)}, "POOLWATCH_MAX_PAGE_SAMPLES: must be within"),
        ({"POOLWATCH_MAX_LISTED": "65537"}, "POOLWATCH_MAX_LISTED: must be within"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Settings.from_env(env)
    assert "\n" not in str(info.value)


def test_the_detection_thresholds_are_the_detector_config_itself() -> None:
    s = Settings.from_env({"POOLWATCH_STALE_FOR": "300", "POOLWATCH_DEFICIT_SAMPLES": "5"})
    assert s.detection == DetectorConfig(stale_for=300.0, deficit_samples=5)
    assert Settings().detection == DetectorConfig()  # one place holds the defaults
    mixin = s.mixin(selector='job="pw"')
    assert (mixin.detector, mixin.selector) == (s.detection, 'job="pw"')
    assert mixin.runbook_base_url == s.alerting.runbook_base_url


def test_flags_win_over_the_environment() -> None:
    args = build_parser().parse_args(["serve", "--port", "9100", "--role", "decode"])
    s = from_args(args, {"POOLWATCH_PORT": "9000", "POOLWATCH_WORKER": "w"})
    assert (s.server.port, s.identity.role, s.identity.worker) == (9100, Role.DECODE, "w")


def test_an_unknown_setting_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="POOLWATCH_PROT: unknown setting"):
        Settings.from_values({"prot": "1"})


def test_the_per_target_caps_are_settings_whose_defaults_are_the_parsers_own() -> None:
    assert Settings().limits == DEFAULT_LIMITS
    assert (MAX_QUEUES, MAX_LISTED, MAX_RANKS, MAX_SAMPLES) == (32, 1024, 512, 10_000)
    assert (MAX_FILE_BYTES, MAX_FILES) == (64 * 1024, 1024)
    args = build_parser().parse_args(["serve", "--max-queues", "8", "--max-discovery-files", "16"])
    s = from_args(args, {"POOLWATCH_MAX_QUEUES": "4", "POOLWATCH_MAX_PAGE_RANKS": "64"})
    assert s.limits == Limits(max_queues=8, max_discovery_files=16, max_page_ranks=64)

from __future__ import annotations

import pytest

from poolwatch.cli import build_parser
from poolwatch.detect.config import DetectorConfig
from poolwatch.errors import ConfigError
from poolwatch.model import Role
from poolwatch.settings import Settings, from_args


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
        ({"POOLWATCH_TLS_VERIFY": "maybe"}, "POOLWATCH_TLS_VERIFY: expected true or false"),
        ({"POOLWATCH_HISTORY": "0"}, "POOLWATCH_HISTORY: must be at least 1"),
        ({"POOLWATCH_LOG_LEVEL": "loud"}, "POOLWATCH_LOG_LEVEL: expected debug, info"),
        ({"POOLWATCH_RESOLVE_SAMPLES": "0"}, "POOLWATCH_RESOLVE_SAMPLES: must be at least 1"),
        ({"POOLWATCH_LARGE_LEAK_FRACTION": "2"}, "POOLWATCH_LARGE_LEAK_FRACTION: must be in"),
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

"""A corrupt alert state file is set aside, logged and reported; the sidecar starts empty."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from poolwatch.sidecar.persist import load_state

GOOD_ALERT = {
    "name": "PoolwatchDoubleFree",
    "subject": "w/dp0-tp0-pp0/mamba",
    "severity": "critical",
    "labels": {"worker": "w"},
    "annotations": {"summary": "s"},
    "value": 1.0,
    "active_since": 10.0,
    "fired_at": 11.0,
    "last_seen": 12.0,
}

CORRUPT = {
    "alerts is a number": json.dumps({"version": 1, "alerts": 5}),
    "null": "null",
    "deep nesting": "[" * 200_000 + "]" * 200_000,
    "not json": "{not json",
    "a NaN time": json.dumps({"version": 1, "alerts": [{**GOOD_ALERT, "last_seen": float("nan")}]}),
    "an alert that is a string": json.dumps({"version": 1, "alerts": ["x"]}),
    "a lone surrogate in a label": json.dumps(
        {"version": 1, "alerts": [{**GOOD_ALERT, "labels": {"w": "\ud800"}}]}
    ),
    "labels that are a list": json.dumps({"version": 1, "alerts": [{**GOOD_ALERT, "labels": []}]}),
}


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_a_corrupt_state_file_is_renamed_aside_logged_and_nothing_is_restored(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "alerts.json"
    path.write_text(content, encoding="utf-8", errors="surrogatepass")
    with caplog.at_level(logging.ERROR, logger="poolwatch.detect"):
        result = load_state(path, now=1234)
    assert result.alerts == []
    assert result.set_aside == tmp_path / "alerts.json.corrupt-1234"
    assert result.set_aside.exists()
    assert not path.exists()
    assert result.error
    assert [r.message for r in caplog.records if "event=state_file_corrupt" in r.message]


def test_a_good_state_file_is_restored_and_left_in_place(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps({"version": 1, "alerts": [GOOD_ALERT]}))
    result = load_state(path)
    assert [a.name for a in result.alerts] == ["PoolwatchDoubleFree"]
    assert result.set_aside is None
    assert path.exists()


def test_a_missing_state_file_is_a_clean_start(tmp_path: Path) -> None:
    result = load_state(tmp_path / "absent.json")
    assert (result.alerts, result.set_aside, result.error) == ([], None, "")


def test_an_unknown_alert_is_skipped_with_a_warning_and_the_rest_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "alerts.json"  # a rollback: a newer version saved an alert this one lacks
    path.write_text(json.dumps({"version": 1, "alerts": [{**GOOD_ALERT, "name": "Nope"}, GOOD_ALERT]}))
    with caplog.at_level(logging.WARNING, logger="poolwatch.detect"):
        result = load_state(path)
    assert [a.name for a in result.alerts] == ["PoolwatchDoubleFree"]
    assert result.set_aside is None
    assert [r.message for r in caplog.records if "event=state_alert_unknown" in r.message]


def test_a_fifo_at_the_state_file_path_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    os.mkfifo(path)  # no writer: a blocking open would hang the sidecar's start for ever
    result = load_state(path)
    assert (result.alerts, result.set_aside) == ([], None)
    assert "not a regular file" in result.error
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # left where it is

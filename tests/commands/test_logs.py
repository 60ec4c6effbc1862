"""One log format for every line of a poolwatch process, its own and uvicorn's; JSON on request."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import re
import signal
import subprocess
from collections.abc import Iterator

import pytest
from tests.helpers import REPO, await_healthy, free_port, serve_argv

from poolwatch.commands.logs import UVICORN_LOG_CONFIG, configure
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ .+")


NAMES = ("poolwatch", "poolwatch.sidecar", "uvicorn", "uvicorn.error")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The loggers as a fresh process has them (another test in this worker may have quieted them),
    and as they were afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    saved = {
        n: (lg.level, lg.propagate, lg.disabled, list(lg.handlers))
        for n in NAMES
        if (lg := logging.getLogger(n))
    }
    for name in NAMES:
        logger = logging.getLogger(name)
        logger.setLevel(logging.NOTSET)
        logger.propagate, logger.disabled = True, False
        for h in list(logger.handlers):
            logger.removeHandler(h)
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for name, (lvl, propagate, disabled, kept) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(lvl)
        logger.propagate, logger.disabled = propagate, disabled
        for h in kept:
            logger.addHandler(h)


def emit_both() -> None:
    logging.config.dictConfig(UVICORN_LOG_CONFIG)
    logging.getLogger("poolwatch.sidecar").warning("event=state_file_write_failed path=%s", "/tmp/x")
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("poolwatch.sidecar").exception("event=scraper_failed")


def test_text_is_one_format_for_poolwatch_and_uvicorn(restore_logging: None) -> None:
    out = io.StringIO()
    configure("info", "text", out)
    emit_both()
    lines = out.getvalue().splitlines()
    assert TEXT_LINE.match(lines[0])
    assert lines[0].endswith("WARNING poolwatch.sidecar event=state_file_write_failed path=/tmp/x")
    assert TEXT_LINE.match(lines[1])
    assert lines[1].endswith("INFO uvicorn.error Started server process [42]")
    assert lines[2].endswith("ERROR poolwatch.sidecar event=scraper_failed")
    assert lines[-1] == "ValueError: boom"


def test_json_is_one_object_per_line_with_the_event_named(restore_logging: None) -> None:
    out = io.StringIO()
    configure("info", "json", out)
    emit_both()
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(docs) == 3
    assert docs[0]["event"] == "state_file_write_failed"
    assert docs[0]["logger"] == "poolwatch.sidecar"
    assert docs[0]["level"] == "WARNING"
    assert docs[1] == {
        "time": docs[1]["time"],
        "level": "INFO",
        "logger": "uvicorn.error",
        "message": "Started server process [42]",
    }
    assert "ValueError: boom" in docs[2]["exception"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", docs[0]["time"])


def test_a_bad_log_format_is_one_line_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="POOLWATCH_LOG_FORMAT: expected text or json, got 'xml'"):
        Settings.from_env({"POOLWATCH_LOG_FORMAT": "xml"})


@pytest.mark.slow  # a real sidecar's start and stop (the formatters themselves are checked above)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_real_sidecar_writes_every_line_in_the_chosen_format(fmt: str) -> None:
    port = free_port()
    env = {**os.environ, "POOLWATCH_LOG_FORMAT": fmt}
    cmd = serve_argv(port, "--snapshot-files", str(REPO / "tests/fixtures/seed-snapshot.json"))
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        await_healthy(f"http://127.0.0.1:{port}")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = err.splitlines()
    assert any("Uvicorn running on" in line or "Started server process" in line for line in lines), err
    for line in lines:
        if fmt == "json":
            assert json.loads(line)["level"], line
        else:
            assert TEXT_LINE.match(line), line

"""``poolwatch serve --help`` describes every flag with its default and its variable."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import Field
from typing import Any

import pytest

from poolwatch.cli import build_parser
from poolwatch.detect.thresholds import help_of
from poolwatch.settings.help import HELP, SHOWN_DEFAULTS, show_default
from poolwatch.settings.sidecar import help_line, setting_fields

SETTINGS = setting_fields()


def serve_help() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    return re.sub(r"\s+", "", out.getvalue())  # argparse wraps lines, even inside a long URL


def test_every_setting_has_one_help_line_and_every_help_line_a_setting() -> None:
    """A family's threshold carries its own line; every other setting has one in HELP, and only those."""
    assert sorted(HELP) == sorted(f.name for f in SETTINGS if help_of(f) is None)
    assert len({f.name for f in SETTINGS}) == len(SETTINGS), "two groups name one setting"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda f: f.name)
def test_serve_help_shows_each_flag_with_its_meaning_default_and_variable(setting: Field[Any]) -> None:
    flag, env = "--" + setting.name.replace("_", "-"), f"POOLWATCH_{setting.name.upper()}"
    shown = SHOWN_DEFAULTS.get(setting.name) or show_default(setting.default)
    expected = f"{flag}VALUE{help_line(setting)}(default:{shown};env{env})"
    assert re.sub(r"\s+", "", expected) in serve_help(), f"{flag} is not described as expected"


@pytest.mark.parametrize(
    ("value", "shown"),
    [((), "none"), (("a", "b"), "a,b"), ("", "none"), (True, "true"), (60.0, "60"), (0.05, "0.05")],
)
def test_defaults_are_shown_as_a_user_would_type_them(value: object, shown: str) -> None:
    assert show_default(value) == shown

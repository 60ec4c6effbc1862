"""Every command's ``--help`` says what the command does: the summary is whole, every option is
described, every default it states is the one the option has, and the top-level help names every
engine poolwatch watches."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from poolwatch.cli import OPTIONAL, build_parser, summary
from poolwatch.discovery.safety import default_directory
from poolwatch.engines import ENGINES
from poolwatch.settings.help import SHOWN_DEFAULTS
from poolwatch.settings.sidecar import Settings
from poolwatch.sources.targets import TargetSet

Parsers = Iterator[tuple[str, argparse.ArgumentParser]]


def commands(parser: argparse.ArgumentParser, path: str = "") -> Parsers:
    """Every (sub)command's parser, by its words (``incident export``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = f"{path} {name}".strip()
                yield words, sub
                yield from commands(sub, words)


PARSER = build_parser()
COMMANDS = dict(commands(PARSER))


def test_the_top_level_help_names_every_engine_and_every_command() -> None:
    text = PARSER.format_help()
    for entry in ENGINES:
        assert entry.title in text
    for name in ("serve", "doctor", "generate", "check", "replay", "incident", *OPTIONAL):
        assert re.search(rf"^\s+{name}\s+\S", text, flags=re.M), f"{name} is not listed with a summary"


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_each_summary_is_one_whole_sentence(words: str) -> None:
    parser = COMMANDS[words]
    text = parser.description or ""
    assert text, f"{words} has no description"
    assert text[0].isupper(), f"{words}: {text!r} starts mid-sentence"
    assert text.endswith("."), f"{words}: {text!r} is cut off or unfinished"
    assert text.count("(") == text.count(")"), f"{words}: {text!r} is cut inside a parenthesis"
    assert "``" not in text


def test_a_summary_is_the_whole_first_paragraph_without_markup() -> None:
    doc = "``poolwatch x``: do this (with ``--y``): and\nthat.\n\nDetails."
    assert summary(doc, "x") == "Do this (with --y): and that."


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_every_option_of_every_command_is_described(words: str) -> None:
    for action in options(COMMANDS[words]):
        assert action.help, f"{words} {action.option_strings[0]} has no help"


@pytest.mark.parametrize("words", sorted(w for w in COMMANDS if w != "serve"))
def test_every_default_a_help_states_is_the_options_own(words: str) -> None:
    """Outside ``serve`` (whose settings are checked by tests/commands/test_serve_help.py),
    the help formatter states each default from the option itself; a default written by hand in
    the text must be the option's too."""
    parser = COMMANDS[words]
    formatter = parser._get_formatter()
    for action in options(parser):
        text = formatter._expand_help(action) if action.help else ""
        for stated in re.findall(r"\(default:? ([^;)]+)\)", text):
            if action.default in (None, "", [], False):
                continue  # a rule in words (e.g. "the file name"), not a value
            assert stated.strip() == str(action.default), f"{words} {action.option_strings[0]}: {text!r}"


def test_serve_states_the_probe_directory_the_sidecar_really_reads() -> None:
    shown = SHOWN_DEFAULTS["probe_dir"]
    for candidate in ("/run/poolwatch", "$XDG_RUNTIME_DIR/poolwatch", "/tmp/poolwatch"):
        assert candidate in shown
    assert TargetSet(Settings(), clock=lambda: 0.0).probe_dir == default_directory(os.environ)
    other = Settings.from_values({"metrics_urls": "http://127.0.0.1:30000"})
    assert TargetSet(other, clock=lambda: 0.0).probe_dir == ""
    assert "none when another target is set" in shown
    given = Settings.from_values({"probe_dir": "/srv/probes", "metrics_urls": "http://127.0.0.1:30000"})
    assert TargetSet(given, clock=lambda: 0.0).probe_dir == "/srv/probes"


def test_the_demo_help_describes_every_flag_it_takes(tmp_path: Path) -> None:
    demo = COMMANDS["demo"]
    described = {a.option_strings[-1] for a in options(demo)}
    assert {"--prefill", "--decode", "--tp", "--seed", "--guard", "--work-dir", "--port"} <= described

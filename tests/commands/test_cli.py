"""The command line: optional commands come from other distributions' entry points; without the
emulator distribution, ``emulate`` and ``demo`` say in one line what to install."""

from __future__ import annotations

import pytest

from poolwatch.cli import OPTIONAL, build_parser, installed_commands, main


@pytest.mark.parametrize("command", sorted(OPTIONAL))
def test_without_the_emulator_each_optional_command_prints_one_line_naming_what_to_install(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--workers", "2"], plugins=lambda: ()) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"poolwatch {command}: not installed here; install it with: pip install 'poolwatch[emulator]'\n"
    )


def test_without_the_emulator_the_help_still_lists_the_optional_commands() -> None:
    text = build_parser(lambda: ()).format_help()
    assert "(needs poolwatch[emulator])" in text
    assert all(name in text for name in OPTIONAL)


def test_the_installed_emulator_registers_demo_and_emulate(capsys: pytest.CaptureFixture[str]) -> None:
    assert {ep.name for ep in installed_commands()} >= set(OPTIONAL)
    with pytest.raises(SystemExit) as done:
        main(["emulate", "--help"])
    assert done.value.code == 0
    assert "--fault NAME@T" in capsys.readouterr().out  # the emulator's own options


def test_an_unknown_flag_of_an_installed_command_is_still_an_error() -> None:
    with pytest.raises(SystemExit) as done:
        main(["generate", "--no-such-flag"])
    assert done.value.code == 2

"""The command line: optional commands come from other distributions' entry points; without the
emulator distribution, ``emulate`` and ``demo`` say how to install it from where the user stands
(it is not on any package index: from the repository, torch's CPU build first)."""

from __future__ import annotations

import tomllib

import pytest
from tests.helpers import REPO

from poolwatch.cli import (
    EMULATOR_INSTALL,
    OPTIONAL,
    TORCH_CPU_INSTALL,
    build_parser,
    installed_commands,
    main,
    missing_hint,
)


@pytest.mark.parametrize("command", sorted(OPTIONAL))
def test_without_the_emulator_each_optional_command_says_how_to_install_it_cpu_torch_first(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--workers", "2"], plugins=lambda: ()) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == missing_hint(command)
    lines = captured.err.splitlines()
    assert lines[0].startswith(f"poolwatch {command}: not installed here; it comes with poolwatch-emulator")
    commands = [line.strip() for line in lines if line.startswith("  pip install")]
    assert commands == [TORCH_CPU_INSTALL, EMULATOR_INSTALL]  # torch first: the emulator's need is then met
    assert "poolwatch[emulator]" not in captured.err  # the extra names a distribution no index has


def test_the_hint_builds_the_emulator_distribution_from_where_it_lies_in_the_repository() -> None:
    assert TORCH_CPU_INSTALL.endswith("--index-url https://download.pytorch.org/whl/cpu")
    subdirectory = EMULATOR_INSTALL.rstrip('"').split("#subdirectory=")[1]
    project = tomllib.loads((REPO / subdirectory / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert EMULATOR_INSTALL.startswith(f'pip install "{project["name"]} @ git+https://github.com/')
    assert f"./{subdirectory}" in missing_hint("demo")


def test_without_the_emulator_the_help_still_lists_the_optional_commands() -> None:
    text = build_parser(lambda: ()).format_help()
    assert "(needs poolwatch-emulator)" in text
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

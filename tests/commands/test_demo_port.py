"""``poolwatch demo`` (``scripts/demo``) when its port is taken: one line naming the port and how
to choose another, exit 2, and nothing started (no cluster, no server traceback)."""

from __future__ import annotations

import argparse
import socket

import pytest
from tests.helpers import free_port

from poolwatch_emulator.demo import add_arguments, run


def demo_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_taken_port_is_one_line_naming_it_and_how_to_choose_another_with_exit_2(
    capfd: pytest.CaptureFixture[str],
) -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):  # another process's server holds the port
        code = run(demo_args("--port", str(port), "--duration", "1"))
    out, err = capfd.readouterr()
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"poolwatch demo: port {port} on 127.0.0.1 is already in use by another process; "
        f"choose another with --port (e.g. scripts/demo --port {port + 1})"
    ]


def test_a_port_held_by_a_listener_on_every_address_is_taken_too(capfd: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    with socket.create_server(("0.0.0.0", port)):
        code = run(demo_args("--port", str(port), "--duration", "1"))
    err = capfd.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1
    assert f"port {port} " in err
    assert "--port" in err

"""The sidecar process tunes its garbage collector once its app is built (and only there: the probe
runs inside SGLang's scheduler, whose collector is not ours to touch)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import uvicorn

from poolwatch.commands import serve


def test_serve_tunes_the_collector_after_building_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(serve, "_build", lambda args: (order.append("build"), (object(), object()))[1])
    monkeypatch.setattr(serve, "_tune_gc", lambda: order.append("gc"))
    monkeypatch.setattr(serve, "_raise_fd_limit", lambda: None)
    monkeypatch.setattr(serve, "server_config", lambda app, settings: None)
    monkeypatch.setattr(uvicorn.Server, "__init__", lambda self, config: None)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: order.append("serve"))
    assert serve.run(argparse.Namespace()) == 0
    assert order == ["build", "gc", "serve"]


def test_the_tuning_freezes_what_exists_and_raises_the_young_threshold() -> None:
    code = (
        "import gc; from poolwatch.commands import serve; serve._tune_gc(); "
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(serve.GC_YOUNG_OBJECTS), "True"]


def test_importing_the_package_leaves_the_collector_alone() -> None:
    code = (
        "import gc; import poolwatch.probe, poolwatch.commands.serve; "
        "print(gc.get_threshold()[0], gc.get_freeze_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["700", "0"]

"""The sidecar process tunes its garbage collector once its app is built (and only there: the probe
runs inside SGLang's scheduler, whose collector is not ours to touch)."""

from __future__ import annotations

import os
import subprocess
import sys

from poolwatch.commands import serve

# ``serve.run`` with the server injected: it reports the collector as the server would find it
SERVE_AND_REPORT = """
import argparse, gc
from poolwatch.commands import serve

def report(config):
    built = any(o is config.app for o in gc.get_objects())  # a frozen object is in no generation
    print(gc.get_threshold()[0], gc.get_freeze_count() > 1000, built, type(config.app).__name__)

parser = argparse.ArgumentParser()
serve.add_arguments(parser)
print(serve.run(parser.parse_args([]), serve=report))
"""


def test_serve_tunes_the_collector_after_building_the_app_and_before_serving() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLWATCH_")}
    env["POOLWATCH_WORKER"] = "gc"
    out = subprocess.run(
        [sys.executable, "-c", SERVE_AND_REPORT], capture_output=True, text=True, check=True, env=env
    ).stdout
    # the young threshold raised, what existed frozen, the app among it (built before the freeze)
    assert out.split() == [str(serve.GC_YOUNG_OBJECTS), "True", "False", "FastAPI", "0"]


def test_importing_the_package_leaves_the_collector_alone() -> None:
    code = (
        "import gc; import poolwatch.probe, poolwatch.commands.serve; "
        "print(gc.get_threshold()[0], gc.get_freeze_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["700", "0"]

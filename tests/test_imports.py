"""What each side imports, in one fresh interpreter (modules other tests imported do not count):
the sidecar, its CLI and its alerting load neither torch nor any probe module, and the probe's own
modules (they run inside an engine's scheduler), every engine room's, load no torch at import time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = """
import sys
sys.modules["torch"] = None  # any import of torch fails
import poolwatch.cli, poolwatch.sidecar.alerting, poolwatch.artifacts.rules
from poolwatch.settings.sidecar import Settings
from poolwatch.settings.groups import TargetSettings
from poolwatch.sidecar.app import create_app
create_app(Settings(targets=TargetSettings(probe_dir=sys.argv[1], metrics_urls=("http://127.0.0.1:1",))))
print(",".join(sorted(m for m in sys.modules if m.startswith("poolwatch.probe"))))
del sys.modules["torch"]
import importlib, pkgutil, poolwatch.probe
for mod in pkgutil.walk_packages(poolwatch.probe.__path__, "poolwatch.probe."):  # every room's, every module
    importlib.import_module(mod.name)
print("torch" in sys.modules)
"""


def test_the_sidecar_loads_no_probe_and_no_torch_and_the_probe_loads_no_torch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    sidecar_probe_modules, probe_loaded_torch = result.stdout.splitlines()
    assert sidecar_probe_modules == "", f"the sidecar loaded probe modules: {sidecar_probe_modules}"
    assert probe_loaded_torch == "False"

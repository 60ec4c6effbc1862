"""Building the sidecar touches neither the probe package (it runs inside SGLang) nor torch.

Each check runs in a fresh interpreter, so modules other tests imported do not count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BUILD_APP = """
import sys
sys.modules["torch"] = None  # any import of torch fails
from poolwatch.settings.sidecar import Settings, TargetSettings
from poolwatch.sidecar.app import create_app
create_app(Settings(targets=TargetSettings(probe_dir=sys.argv[1], metrics_urls=("http://127.0.0.1:1",))))
print(",".join(sorted(m for m in sys.modules if m == "poolwatch.probe" or m.startswith("poolwatch.probe."))))
"""


def test_building_the_app_with_probe_discovery_loads_no_probe_module_and_no_torch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BUILD_APP, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"probe modules loaded: {result.stdout.strip()}"

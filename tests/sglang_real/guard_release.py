"""Guard v2 against one SGLang release family's own classes, on CPU (one JSON line per check).

Run with a release venv's Python, this checkout's ``service/`` on ``PYTHONPATH`` and, for a family
without a venv of its own, that release's ``sglang`` package first on ``PYTHONPATH``
(``scripts/sglang_overlay.py``)::

    python tests/sglang_real/guard_release.py 0.5.6

The version is the release read (the probe is told it: an overlay's venv has another release
installed).  The exit code is the number of failed checks.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("SGLANG_MAMBA_SSM_DTYPE", "float32")

from check_release import RESULTS, report, run, set_server_args

from poolwatch.probe.sglang.shapes import shape_for_version


def main(argv: list[str]) -> int:
    version = argv[0]
    import sglang

    family = shape_for_version(version).family
    report(
        "the release read is the one asked for",
        getattr(sglang, "__version__", version) == version,
        {"sglang": sglang.__file__, "version": getattr(sglang, "__version__", "")},
    )
    if family not in ("0.5.4", "0.5.23"):  # 0.5.23's driver publishes a resolved ServerArgs itself
        set_server_args()  # 0.5.5.post3 on read the speculative settings and page size from it
    if family == "0.5.23":
        from guard_0523_pools import guard_0523_pool_checks

        run("guard v2, every pool", lambda: guard_0523_pool_checks(version))
    else:
        from guard_pools import guard_pool_checks

        run("guard v2, every pool", lambda: guard_pool_checks(version, family))
    return sum(1 for r in RESULTS if not r["ok"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Guard on one SGLang release's own classes, on CPU (one JSON line per check): guard v2 on every
pool (``guard_pools.py``), at the chunk boundary (``guard_chunks.py``) and by ownership at the free
(``guard_owners.py``: what changed since the last census), during HiCache's load-back
(``guard_load_back.py``: ``HiRadixCache``, from 0.5.19 the unified tree's host pool group); a
healthy chunk the tree cached balances (``tree_balance.py``).

Run with a release venv's Python, this checkout's ``service/`` and root on ``PYTHONPATH`` and, for a
release without a venv of its own, that release's ``sglang`` package first (an overlay,
:meth:`rigs.venv.Venv.environment`)::

    python -m tests.sglang_real.guard_release 0.5.6

The version is the release read (the probe is told it: an overlay's venv has another release
installed).  The exit code is the number of failed checks.
"""

from __future__ import annotations

import sys

from rigs.checks import failures, report, run
from rigs.sglang.driver import Driver
from tests.sglang_real.guard_chunks import guard_chunk_checks
from tests.sglang_real.guard_load_back import guard_load_back_checks
from tests.sglang_real.guard_owners import guard_owner_checks
from tests.sglang_real.guard_pools import guard_pool_checks
from tests.sglang_real.tree_balance import tree_balance_checks


def main(argv: list[str]) -> int:
    import sglang

    driver = Driver(argv[0])
    found = getattr(sglang, "__version__", "")
    report(
        "the release read is the one asked for",
        found == driver.release.version,
        {"sglang": sglang.__file__, "version": found},
    )
    run("guard v2, every pool", lambda: guard_pool_checks(driver))
    run("guard v2, chunk boundaries", lambda: guard_chunk_checks(driver))
    run("guard by ownership at the free", lambda: guard_owner_checks(driver))
    run("guard during HiCache load-back", lambda: guard_load_back_checks(driver))
    run("a healthy chunk cached by the tree", lambda: tree_balance_checks(driver))
    return failures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

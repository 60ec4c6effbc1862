"""The real-engine tiers' one test shape: run a module of this checkout inside a release venv
(:meth:`rigs.venv.Venv.run`) and require every check it printed to pass.  A missing venv raises
:class:`rigs.venv.Unavailable`, which ``tests/conftest.py`` turns into a skip naming the command that
builds it (a failure under ``POOLWATCH_REQUIRE_TOOLS=1``, as in ``.ci/run``)."""

from __future__ import annotations

import json
from collections.abc import Collection

from rigs.venv import Ran, Venv


def passed(
    venv: Venv, module: str, *args: str, at_least: int = 1, checks: Collection[str] = (), timeout: float = 900
) -> Ran:
    """``python -m module args`` in ``venv``: no check failed, at least ``at_least`` ran (and every
    one of ``checks``), and the script exited 0."""
    ran = venv.run(module, *args, timeout=timeout)
    assert ran.failed == [], json.dumps(ran.failed, indent=1)[:6000]
    assert len(ran.results) >= at_least, ran.stderr[-4000:]
    assert ran.names >= set(checks), sorted(set(checks) - ran.names)
    assert ran.returncode == 0, ran.stderr[-4000:]
    return ran

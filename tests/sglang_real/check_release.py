"""Drive one real SGLang release's pools on CPU and check the probe against SGLang's own checks.

Run inside the release's venv (:meth:`rigs.venv.Venv.run`, this checkout's ``service/`` and root on
``PYTHONPATH``)::

    python -m tests.sglang_real.check_release 0.5.4.post1

:class:`rigs.sglang.driver.Driver` builds SGLang's own allocator, Mamba pool, request pool and tree
with tiny sizes on device ``cpu`` and moves real ``Req`` objects through SGLang's own methods the
way the release's scheduler does; this script checks the release against the rigs' table and the
probe's, the probe's activation on the real ``Scheduler``, its final decision against SGLang's idle
check, and the scenarios (``scenarios.py``, ``seed_final.py``, ``incident_flow.py`` where #12432 is
live, ``direct_unified.py`` on the unified tree's releases), printing one JSON line per check.  An
overlay's release is read from its package (``sglang.__version__``; the venv has another installed).
The exit code is the number of failed checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from rigs.checks import failures, report, run, run_all
from rigs.sglang.driver import Driver
from rigs.sglang.releases import Release
from tests.sglang_real.scenarios import scenarios


def check_table(release: Release) -> None:
    """The rigs' table (read from the wheel) and the probe's shape table agree on what both hold."""
    from poolwatch.probe.sglang.shapes import shape_for_version

    shape = shape_for_version(release.version)
    ours = (release.loop_hook, release.idle_hook, release.mamba_allocator)
    probes = (shape.loop_hook, shape.idle_hook, shape.mamba_allocator)
    report(
        "the rigs' release table and the probe's agree on the hooks and the Mamba free list",
        ours == probes,
        {"rigs": ours, "probe": probes, "family": shape.family},
    )


def check_activation(release: Release) -> None:
    """The real Scheduler class: the hooks exist under the names the probe wraps, and the wheel's
    .pth line wraps it in a fresh interpreter when POOLWATCH_PROBE=1 (and only then)."""
    from sglang.srt.managers.scheduler import Scheduler

    from poolwatch.probe.core.hooks import hook_names
    from poolwatch.probe.sglang.engine import SGLANG

    expected = {release.loop_hook, release.idle_hook, "process_prefill_chunk"}
    found = set(hook_names(Scheduler, SGLANG.hooks))
    report("the real Scheduler has the methods the probe wraps", found == expected, sorted(found))
    code = (
        "import sglang.srt.managers.scheduler as m, json; "
        "print(json.dumps(sorted(m.Scheduler.__dict__.get('__poolwatch_originals__', {}))))"
    )
    for armed in (True, False):
        env = {k: v for k, v in os.environ.items() if not k.startswith("POOLWATCH_PROBE")}
        env.update({"POOLWATCH_PROBE": "1"} if armed else {})
        out = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = out.stdout.strip().splitlines()
        wrapped = json.loads(lines[-1]) if out.returncode == 0 and lines else None
        report(
            f"the .pth line {'wraps' if armed else 'leaves alone'} the real Scheduler "
            f"{'with' if armed else 'without'} POOLWATCH_PROBE=1",
            wrapped == (sorted({"__init__", *expected}) if armed else []),
            {"wrapped": wrapped, "stderr": out.stderr[-1500:]},
        )


def check_idle_gates(release: Release) -> None:
    """The final decision's release gates against the release's own idle check (idle_gates.py)."""
    from tests.sglang_real.idle_gates import check_legacy, check_on_idle

    (check_on_idle if release.idle_hook == "on_idle" else check_legacy)(release.version, report)


def all_scenarios(d: Driver) -> list[tuple[str, Callable[[], Any]]]:
    out = scenarios(d)
    if d.release.seed_live:
        from tests.sglang_real.incident_flow import incident_checks
        from tests.sglang_real.seed_final import seed_final, seed_last_word

        out += [
            ("seed final snapshot", lambda: seed_final(d)),
            ("seed last word", lambda: seed_last_word(d)),
            ("incident bundle", lambda: incident_checks(d)),
        ]
    if d.release.unified_tree:
        from tests.sglang_real.direct_unified import direct_scenarios

        out += direct_scenarios(d)
    return out


def main(argv: list[str]) -> int:
    import sglang

    driver = Driver(argv[0])
    found = getattr(sglang, "__version__", "")
    report(  # an overlay's venv has another release installed: the package read is the overlay's
        "the release read is the one asked for",
        found == driver.release.version,
        {"sglang": sglang.__file__, "version": found},
    )
    run("the release tables", lambda: check_table(driver.release))
    run("activation", lambda: check_activation(driver.release))
    run("idle gates", lambda: check_idle_gates(driver.release))
    run_all(all_scenarios(driver))
    return failures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

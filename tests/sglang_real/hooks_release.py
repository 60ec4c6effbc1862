"""Run in a release's venv or overlay (``tests/sglang_real/test_real_sglang.py``): the release's real
``Scheduler`` class has the methods the probe wraps, under the names the rigs' table read from the
wheel, and the two release tables agree -- on releases outside the probe tier, whose full check
(``check_release.py``) does this and more.  0.5.13 - 0.5.19 receive through a component and start
each loop with ``process_input_requests``; a probe that knew only ``recv_requests`` and
``ingest_requests`` sampled there only when idle.

    <release venv>/bin/python -m tests.sglang_real.hooks_release 0.5.19
"""

from __future__ import annotations

import sys

from rigs.checks import failures, report, run
from rigs.sglang.releases import Release, release
from tests.sglang_real.check_release import check_table


def check_hooks(rel: Release) -> None:
    from sglang.srt.managers.scheduler import Scheduler

    from poolwatch.probe.core.hooks import hook_names
    from poolwatch.probe.sglang.engine import SGLANG

    expected = {rel.loop_hook: ("before", "on_loop_boundary"), rel.idle_hook: ("before", "on_idle")}
    found = hook_names(Scheduler, SGLANG.hooks)
    report(
        f"the real Scheduler of {rel.version} starts each loop and idles where the probe looks",
        {k: found.get(k) for k in expected} == expected and "process_prefill_chunk" in found,
        sorted(found),
    )


def main(argv: list[str]) -> int:
    rel = release(argv[0])
    run("the release tables", lambda: check_table(rel))
    run("the hooks", lambda: check_hooks(rel))
    return failures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

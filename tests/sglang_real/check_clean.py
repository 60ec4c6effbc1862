"""Long clean runs of one real SGLang release, judged by every detector as the sidecar deploys it:
not one finding of the probe, not one alert of any family, and SGLang's own idle check passing at
the end (issue 39: no false alarm on the clean long runs of every supported release).

Run inside the release's venv (:meth:`rigs.venv.Venv.run`)::

    python -m tests.sglang_real.check_clean 0.5.23 [WORKLOAD ...]

:class:`rigs.sglang.driver.Driver` moves real ``Req`` objects through the release's own pools and
tree for :data:`STEPS` loop turns of :data:`SECONDS_PER_STEP` each -- 1,000 s of engine time, past
the stranded-hold bound (600 s) and every rule's wait.  The probe samples at every loop hook with
every census due, on the engine's clock, guard on where the release is guarded (a refused healthy
free is a finding); every snapshot goes to a :class:`~rigs.timeline.Timeline`
whose :class:`~poolwatch.detect.detector.Detector` carries the shipped thresholds.  The workloads:

* ``clean_hybrid`` -- a full KV + Mamba rank: prompts sharing prefixes through the tree, long
  prompts prefilled in chunks, decode, an abort every 23 turns, a retraction every 41 (from 0.5.9:
  :func:`retracts`), the tree evicted whenever a step needs room (SGLang's allocation helpers'
  order);
* ``clean_pd_prefill`` -- a PD prefill rank: each prompt prefilled (long ones in chunks), its KV
  sent while it waits a turn on the inflight queue, then released;
* ``clean_pd_decode`` -- a dense PD decode rank (its chunk cache; from 0.5.20 its own radix tree):
  each request's KV lands through SGLang's own pre-allocation, ``process_prebuilt`` runs it, it
  decodes to its end and SGLang's own offload manager copies it to host and releases it (from
  0.5.5.post3: the rig follows ``kv_allocated_len``);
* ``clean_hicache`` -- a dense rank with HiCache (:mod:`tests.sglang_real.check_clean_hicache`):
  the busy turns of ``clean_hybrid`` over more prefixes than the device pool keeps, so evicted
  prefixes live on host and come back through SGLang's own load-back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rigs.checks import report, run_all
from rigs.timeline import Timeline
from tests.sglang_real.clean_traffic import STEPS, Unsupported, hybrid, pd_prefill


def pd_decode(version: str) -> tuple[Timeline, dict[str, Any]]:
    """``clean_pd_decode``: :mod:`tests.sglang_real.check_clean_decode`."""
    from rigs.sglang.releases import release
    from tests.sglang_real.check_clean_decode import pd_decode as run

    if not release(version).kv_lens:
        raise Unsupported(
            "the rig's decode rank follows kv_allocated_len, which SGLang keeps from 0.5.5.post3"
        )
    return run(version)


def hicache(version: str) -> tuple[Timeline, dict[str, Any]]:
    """``clean_hicache``: :mod:`tests.sglang_real.check_clean_hicache`."""
    from tests.sglang_real.check_clean_hicache import hicache as run

    return run(version)


def spec(version: str) -> tuple[Timeline, dict[str, Any]]:
    """``clean_spec``: :mod:`tests.sglang_real.check_clean_spec`."""
    from tests.sglang_real.check_clean_spec import spec as run
    from tests.sglang_real.check_clean_spec import why_not

    if reason := why_not(version):
        raise Unsupported(reason)
    return run(version)


WORKLOADS: dict[str, Callable[[str], tuple[Timeline, dict[str, Any]]]] = {
    "clean_hybrid": hybrid,
    "clean_pd_prefill": pd_prefill,
    "clean_pd_decode": pd_decode,
    "clean_hicache": hicache,
    "clean_spec": spec,
}


def check(name: str, version: str) -> Callable[[], None]:
    def run() -> None:
        try:
            timeline, ran = WORKLOADS[name](version)
        except Unsupported as exc:
            report(name, True, {"skipped": str(exc)})
            return
        row = timeline.row()
        quiet = row["finding"] is None and row["alerts"] == {} and ran["sglang_idle_check"] == "passed"
        report(
            name,
            quiet and timeline.snapshots > STEPS,
            {**ran, "snapshots": timeline.snapshots, "finding": row["finding"], "alerts": row["alerts"]},
        )

    return run


def main() -> int:
    version, wanted = sys.argv[1], sys.argv[2:]
    return run_all([(name, check(name, version)) for name in WORKLOADS], wanted)


if __name__ == "__main__":
    sys.exit(main())

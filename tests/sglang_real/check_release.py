"""Drive one real SGLang release's pools on CPU and check the probe against SGLang's own checks.

Run inside a release venv built by ``scripts/sglang_venv.py`` with this checkout's ``service/`` on
``PYTHONPATH``::

    POOLWATCH_CACHE=... python tests/sglang_real/check_release.py 0.5.4.post1

It builds SGLang's own allocator, Mamba pool, request pool and Mamba radix cache with tiny sizes
on device ``cpu``, moves real ``Req`` objects through SGLang's own methods the way the scheduler
does (``init_next_round_input``/``match_prefix``, ``alloc``, ``cache_unfinished_req``,
``cache_finished_req``, ``free``, ``evict``), installs the probe on a scheduler-shaped holder, and
prints one JSON line per check: ``{"check": name, "ok": bool, "detail": ...}``.  The exit code is
the number of failed checks.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("SGLANG_MAMBA_SSM_DTYPE", "float32")


from poolwatch.conservation import gap
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.lifecycle import probe_of

CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    census_interval_s=0.0,
    kv_census_interval_s=0.0,
    idle_kv_census_gap_s=0.0,
    serve=False,
    directory="/nonexistent-poolwatch-dir",
)
RESULTS: list[dict[str, Any]] = []


def report(check: str, ok: bool, detail: Any = None) -> None:
    RESULTS.append({"check": check, "ok": bool(ok), "detail": detail})
    print(json.dumps(RESULTS[-1], default=str), flush=True)


def gaps(snap: Snapshot) -> dict[str, int | None]:
    return {p.value: gap(a) for p, a in snap.pools.items()}


class Batch:
    """The part of ScheduleBatch the loop and process_prefill_chunk touch."""

    def __init__(self, reqs: list[Any], mode: Any) -> None:
        self.reqs, self.forward_mode, self.batch_is_full = list(reqs), mode, False
        self.chunked_req: Any = None

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def filter_batch(self, chunked_req_to_exclude: Any = None, **_: Any) -> None:
        drop = (
            chunked_req_to_exclude if isinstance(chunked_req_to_exclude, list) else [chunked_req_to_exclude]
        )
        self.reqs = [r for r in self.reqs if not r.finished() and all(r is not d for d in drop)]


class Driver:
    """What every release driver shares: the samples and the assertions on them."""

    version = ""

    def __init__(self) -> None:
        self.samples: list[Snapshot] = []
        self.sched: Any = None

    def boundary(self) -> Snapshot:
        """One scheduler loop boundary: what the probe sees there."""
        self.sched.recv_requests()
        probe = probe_of(self.sched)
        assert probe is not None
        assert probe.latest is not None
        self.samples.append(probe.latest)
        return probe.latest

    def expect_balanced(self, label: str) -> None:
        snap = self.boundary()
        bad = {k: v for k, v in gaps(snap).items() if v != 0}
        unread = {p.value: a.unreadable for p, a in snap.pools.items() if a.unreadable}
        report(
            f"{label}: every pool balances exactly ({snap.phase.value})",
            not bad and not unread and not snap.tripwires,
            {"gaps": gaps(snap), "unreadable": unread, "tripwires": [str(t) for t in snap.tripwires]},
        )


def set_server_args() -> None:
    """SGLang's own ServerArgs with every field at its default (no __post_init__: that would need a
    model), as the scheduler process sets it globally."""
    import dataclasses

    from sglang.srt import server_args as sa

    args = sa.ServerArgs.__new__(sa.ServerArgs)
    for f in dataclasses.fields(sa.ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    args.page_size = 1
    sa.set_global_server_args_for_scheduler(args)


def run(check: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        report(check, False, traceback.format_exc()[-3000:])


EXPECTED_HOOKS = {
    "0.5.4": {"recv_requests", "self_check_during_idle", "process_prefill_chunk"},
    "0.5.9": {"recv_requests", "self_check_during_idle", "process_prefill_chunk"},
    "0.5.23": {"ingest_requests", "on_idle", "process_prefill_chunk"},
}


def check_activation(version: str) -> None:
    """The real Scheduler class: the hooks exist under the names the probe wraps, and the wheel's
    .pth line wraps it in a fresh interpreter when POOLWATCH_PROBE=1 (and only then)."""
    import subprocess

    from sglang.srt.managers.scheduler import Scheduler

    from poolwatch.probe.core.hooks import hook_names
    from poolwatch.probe.sglang.engine import SGLANG
    from poolwatch.probe.sglang.shapes import shape_for_version

    family = shape_for_version(version).family
    found = set(hook_names(Scheduler, SGLANG.hooks))
    report(
        "the real Scheduler has the methods the probe wraps", found == EXPECTED_HOOKS[family], sorted(found)
    )
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
        wrapped = (
            json.loads(out.stdout.strip().splitlines()[-1])
            if out.returncode == 0 and out.stdout.strip()
            else None
        )
        expect = sorted({"__init__", *EXPECTED_HOOKS[family]}) if armed else []
        report(
            f"the .pth line {'wraps' if armed else 'leaves alone'} the real Scheduler "
            f"{'with' if armed else 'without'} POOLWATCH_PROBE=1",
            wrapped == expect,
            {"wrapped": wrapped, "stderr": out.stderr[-1500:]},
        )


def check_idle_gates(version: str) -> None:
    """The final decision's release gates against the release's own idle check (idle_gates.py)."""
    from idle_gates import check_legacy, check_on_idle

    from poolwatch.probe.sglang.shapes import shape_for_version

    if shape_for_version(version).idle_hook == "on_idle":
        check_on_idle(version, report)
    else:
        check_legacy(version, report)


def driver_for(version: str) -> Driver:
    from poolwatch.probe.sglang.shapes import shape_for_version

    family = shape_for_version(version).family
    if family in ("0.5.4",):
        from drive_054 import Driver054

        return Driver054()
    if family in ("0.5.9", "0.5.10"):
        from drive_059 import Driver059

        return Driver059()
    if family == "0.5.23":
        from drive_0523 import Driver0523

        return Driver0523()
    raise SystemExit(f"no driver for SGLang {version} (family {family})")


def main(argv: list[str]) -> int:
    version = argv[0] if argv else ""
    from importlib import metadata

    installed = metadata.version("sglang")
    report("the venv holds the release asked for", installed == version, {"installed": installed})
    run("activation", lambda: check_activation(installed))
    run("idle gates", lambda: check_idle_gates(installed))
    driver = driver_for(installed)
    for name, scenario in driver.scenarios():
        run(name, scenario)
    return sum(1 for r in RESULTS if not r["ok"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

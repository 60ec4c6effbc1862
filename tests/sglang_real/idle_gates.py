"""The final decision's release gates against the release's own idle check (run inside a release
venv by ``check_release.py``).

SGLang's idle check of the release (0.5.4/0.5.9: the mixin's ``self_check_during_idle``; 0.5.23:
``Scheduler.on_idle``) is called on a stand-in scheduler whose queues, HiSparse flag and staging
queue, and (0.5.23) real ``DecodeTransferQueue`` with deferred KV releases are set per case; the
rest of the scheduler (metrics, checkers, sleep) is a ``MagicMock`` that records whether the pool
check ran.  For every case the probe's :func:`~poolwatch.probe.sglang.final.sglang_checks`, fed
the gates the probe reads from the same object (:func:`~poolwatch.probe.sglang.phase.gate_readings`),
must say what SGLang did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import MagicMock

from poolwatch.model.rank import Phase
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.final import sglang_checks
from poolwatch.probe.sglang.phase import gate_readings
from poolwatch.probe.sglang.shapes import shape_for_version

Report = Callable[[str, bool, Any], None]


class Staging:
    """The one field of HiSparseCoordinator the gate reads (``ack_staging_queue``)."""

    def __init__(self, n: int) -> None:
        self.ack_staging_queue = [object()] * n


def _mode(role: str) -> Any:
    from sglang.srt.disaggregation.utils import DisaggregationMode

    return DisaggregationMode.PREFILL if role == "prefill" else DisaggregationMode.DECODE


def _legacy_case(role: str, busy_queue: int, hisparse: bool, staging: int) -> tuple[Any, dict[str, int]]:
    """A stand-in for ``self_check_during_idle`` (0.5.4 .. 0.5.10) and the PD depths it gates on."""
    s = MagicMock()
    s.disaggregation_mode = _mode(role)
    s.disagg_prefill_inflight_queue = [object()] * busy_queue
    s.waiting_queue = []
    s.disagg_decode_transfer_queue.queue = [object()] * busy_queue
    s.disagg_decode_prealloc_queue.queue = []
    s.server_args.disaggregation_decode_enable_offload_kvcache = False
    s.enable_hisparse = hisparse
    s.hisparse_coordinator = Staging(staging) if hisparse else None
    if role == "prefill":
        depths = {"prefill_inflight": busy_queue}
    else:
        depths = {"waiting": 0, "decode_transfer": busy_queue, "decode_prealloc": 0, "decode_offload": 0}
    return s, depths


def check_legacy(version: str, report: Report) -> None:
    from sglang.srt.managers.scheduler_runtime_checker_mixin import SchedulerRuntimeCheckerMixin

    shape = shape_for_version(version)
    for role in ("prefill", "decode"):
        for busy in (0, 1):
            for hisparse, staging in ((False, 0), (True, 2)):
                s, depths = _legacy_case(role, busy, hisparse, staging)
                SchedulerRuntimeCheckerMixin.self_check_during_idle(s)
                ran = s.check_memory.called
                gates = gate_readings(s, Reading(), role)
                ours = sglang_checks(shape, role, Phase.BUSY, depths, gates)
                did = "checked" if ran else "skipped"
                report(
                    f"{version} {role}, PD queue {busy}, HiSparse staging {staging}: the probe's final "
                    f"decision says what SGLang's self_check_during_idle did ({did})",
                    ours == ran,
                    {"sglang": ran, "probe": ours, "gates": gates},
                )


def _deferred(n: int) -> Any:
    from sglang.srt.disaggregation.decode import DecodeTransferQueue

    queue = object.__new__(DecodeTransferQueue)
    queue._deferred_releases = [object()] * n
    queue.queue = []
    return queue


def check_on_idle(version: str, report: Report) -> None:
    from sglang.srt.managers.scheduler import Scheduler

    shape = shape_for_version(version)
    for role in ("prefill", "decode"):
        for fully_idle in (True, False):
            for hisparse in (False, True):
                for held in (0, 2):
                    s = MagicMock()
                    s.is_fully_idle.return_value = fully_idle
                    s.enable_hisparse = hisparse
                    s.hisparse_coordinator = None
                    s.enable_unified_memory = False
                    s._last_stall_publish_ts = 0.0
                    s.enable_hicache_storage = s.enable_lmcache = False
                    s.disaggregation_mode = _mode(role)
                    s.disagg_decode_transfer_queue = _deferred(held)
                    s.invariant_checker._check_all_pools.return_value = (False, [])
                    s.token_to_kv_pool_allocator.verify_byte_accounting.return_value = []
                    Scheduler.on_idle(s)
                    ran = s.invariant_checker._check_all_pools.called
                    gates = gate_readings(s, Reading(), role)
                    phase = Phase.IDLE if fully_idle else Phase.BUSY
                    ours = sglang_checks(shape, role, phase, {}, gates)
                    report(
                        f"{version} {role}, fully idle {fully_idle}, HiSparse {hisparse}, deferred releases "
                        f"{held}: the probe's final decision says what SGLang's on_idle did "
                        f"({'checked' if ran else 'skipped'})",
                        ours == ran,
                        {"sglang": ran, "probe": ours, "gates": gates},
                    )

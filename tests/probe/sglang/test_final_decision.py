""" "About to raise" as the release decides it (reference §1.1), on SGLang-shaped fakes: the probe's
own phase may say busy where SGLang's check runs anyway (0.5.4: ``last_batch`` is cleared after the
check), and may say idle-ish where the check is gated (0.5.9's PD queues, 0.5.12's full idle)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.probe.sglang.setups import GUARD_CONFIG as CONFIG
from tests.probe.sglang.setups import seed_rank

from poolwatch.discovery.files import read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.rank import Phase, Pool, PoolAccount
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.final import residual, sglang_checks
from poolwatch.probe.sglang.shapes import shape_for_version
from rigs.fakes.clock import FakeClock


def test_0_5_4s_check_runs_at_its_hook_while_last_batch_still_holds_the_finished_batch(
    tmp_path: Path,
) -> None:
    rank, _ = seed_rank()
    clock = FakeClock()
    config = replace(CONFIG, directory=str(tmp_path), sample_interval_s=1.0, census_interval_s=10.0)
    probe = new_probe(SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)
    probe.on_loop_boundary("recv_requests")
    rank.sched.chunked_req = None  # the request finished; last_batch still holds its batch
    assert rank.sched.last_batch is not None
    probe.on_loop_boundary("recv_requests")
    probe.on_idle("self_check_during_idle")
    assert probe.latest is not None
    assert probe.latest.phase is not Phase.IDLE  # the probe's own phase: busy
    # but SGLang's check runs, and raises: the last word landed
    ((_, _),) = read_final_dir(tmp_path, read_secret(tmp_path) or "")


@pytest.mark.parametrize(
    ("version", "role", "queues", "phase", "checks"),
    [
        ("0.5.4.post1", "prefill", {"prefill_inflight": 3}, Phase.BUSY, True),  # the loop gated it
        ("0.5.9", "prefill", {"prefill_inflight": 1, "last_batch": 1}, Phase.BUSY, False),
        ("0.5.9", "prefill", {"prefill_inflight": 0, "last_batch": 1}, Phase.BUSY, True),
        (
            "0.5.10",
            "decode",
            {"waiting": 0, "decode_transfer": 0, "decode_prealloc": 1, "decode_offload": 0},
            Phase.BUSY,
            False,
        ),
        (
            "0.5.10",
            "decode",
            {"waiting": 0, "decode_transfer": 0, "decode_prealloc": 0, "decode_offload": 0},
            Phase.BUSY,
            True,
        ),
        ("0.5.9", "prefill", {"prefill_inflight": None}, Phase.UNKNOWN, False),  # unreadable: probe's view
        ("0.5.12", "prefill", {"last_batch": 1}, Phase.BUSY, False),
        ("0.5.23", "decode", {}, Phase.IDLE, True),
    ],
)
def test_whether_sglangs_check_runs_at_its_hook(
    version: str, role: str, queues: dict[str, int | None], phase: Phase, checks: bool
) -> None:
    assert sglang_checks(shape_for_version(version), role, phase, queues) is checks


IDLE_DECODE = {"waiting": 0, "decode_transfer": 0, "decode_prealloc": 0, "decode_offload": 0}


@pytest.mark.parametrize(
    ("version", "role", "queues", "phase", "gates", "checks"),
    [
        # 0.5.5.post3 and 0.5.6 already return early on PD queues (read in their wheels)
        ("0.5.5.post3", "prefill", {"prefill_inflight": 2}, Phase.BUSY, {}, False),
        ("0.5.6", "decode", {**IDLE_DECODE, "decode_transfer": 1}, Phase.BUSY, {}, False),
        ("0.5.6", "prefill", {"prefill_inflight": 0, "last_batch": 1}, Phase.BUSY, {}, True),
        # 0.5.10: HiSparse staging returns early; HiSparse with nothing staged checks
        ("0.5.10", "decode", IDLE_DECODE, Phase.IDLE, {"hisparse": 1, "hisparse_staging": 2}, False),
        ("0.5.10", "decode", IDLE_DECODE, Phase.IDLE, {"hisparse": 1, "hisparse_staging": 0}, True),
        (
            "0.5.9",
            "decode",
            IDLE_DECODE,
            Phase.IDLE,
            {"hisparse": 1, "hisparse_staging": 2},
            True,
        ),  # none yet
        # 0.5.12+: no pool check at all with HiSparse on
        ("0.5.12", "decode", {}, Phase.IDLE, {"hisparse": 1, "hisparse_staging": 0}, False),
        ("0.5.12", "decode", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 3}, True),  # none yet
        ("0.5.17", "decode", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 3}, True),  # none yet
        # 0.5.19 on: a decode rank with deferred KV releases pending skips it; a prefill rank has none
        ("0.5.19", "decode", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 3}, False),
        ("0.5.19", "prefill", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 3}, True),
        ("0.5.23", "decode", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 3}, False),
        ("0.5.23", "decode", {}, Phase.IDLE, {"hisparse": 0, "deferred_releases": 0}, True),
        (
            "0.5.23",
            "decode",
            {},
            Phase.IDLE,
            {"hisparse": 0, "deferred_releases": None},
            True,
        ),  # unread: kept
        ("0.5.23", "decode", {}, Phase.BUSY, {"hisparse": 0, "deferred_releases": 0}, False),
    ],
)
def test_the_release_gates_hisparse_and_deferred_release(
    version: str,
    role: str,
    queues: dict[str, int | None],
    phase: Phase,
    gates: dict[str, int | None],
    checks: bool,
) -> None:
    assert sglang_checks(shape_for_version(version), role, phase, queues, gates) is checks


def test_sglangs_formula_ignores_what_requests_hold_and_legacy_swa_wants_nothing_used() -> None:
    account = PoolAccount(Pool.MAMBA, size=10, available=6, evictable=1, protected=2, held=1)
    assert residual(Pool.MAMBA, account) == 1  # used 3 - protected 2: SGLang sees one slot too many
    swa = PoolAccount(Pool.SWA, size=10, available=8, evictable=0, protected=2, held=0)
    assert residual(Pool.SWA, swa) == 0
    assert residual(Pool.SWA, swa, swa_used_only=True) == 2
    assert residual(Pool.FULL, PoolAccount(Pool.FULL, size=None)) is None

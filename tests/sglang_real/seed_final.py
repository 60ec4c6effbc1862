"""The seed's last moments on 0.5.4.post1 at the deployed sampling rates: the final snapshot on disk,
and handed to a long-polling collector, before SGLang's own idle check raises.

0.5.4's PD prefill loop transfers and releases the last chunk's batch within one iteration, so
SGLang's idle check runs while ``last_batch`` still holds it (the loop clears it only after the
check) and the probe's own phase says busy: the final decision must come from the release gates
(run only where #12432 is live; later releases' decision is tested on the emulator).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from typing import Any

from poolwatch.codec.snapshot import parse_snapshot
from poolwatch.discovery.files import ensure_secret, read_secret
from poolwatch.discovery.final import read_final_dir
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.last_word import Outcome
from poolwatch.probe.lifecycle import detach
from poolwatch.probe.sglang.final import residual
from rigs.checks import report
from rigs.sglang.driver import Driver
from tests.sglang_real.long_poll import LongPoll

__all__ = ["seed_final", "seed_last_word"]


def _deployed(d: Driver, directory: str, *, serve: bool) -> ProbeConfig:
    return replace(ProbeConfig.from_env({}), serve=serve, directory=directory, release=d.release.version)


def _to_idle_check(d: Driver) -> None:
    """The seed flow as 0.5.4's PD prefill loop ends it, up to the idle hook (the probe looks
    first), just before SGLang's check_memory."""
    s = d.sched
    c = d.arrive("c", list(range(200, 230)))
    d.prefill([c], chunk=8)
    d.loop()
    d.chunk_step()  # the seed: the chunked request's Mamba slot goes back
    d.prefill([c], chunk=8)
    d.loop()
    d.chunk_step()
    last = d.prefill([c], chunk=64)  # the last chunk: last_batch holds it
    d.loop()
    s.tree_cache.cache_unfinished_req(c)
    d.finish(c)  # transferred and released in this iteration
    report("seed final: last_batch still holds the batch at SGLang's check", s.last_batch is last)
    getattr(s, d.release.idle_hook)()


def _raises(d: Driver) -> bool:
    try:
        d.strict_check()
    except ValueError:
        return True
    return False


def seed_final(d: Driver) -> None:
    """No endpoint: the final snapshot must be on disk, naming the Mamba surplus, before SGLang's
    check_memory raises."""
    directory = tempfile.mkdtemp(prefix="poolwatch-final-")
    try:
        d.new("prefill", config=_deployed(d, directory, serve=False))
        _to_idle_check(d)
        finals = read_final_dir(directory, read_secret(directory) or "")
        raised = _raises(d)
        snap = parse_snapshot(finals[0][1]) if finals else None
        mamba = residual(Pool.MAMBA, snap.pools[Pool.MAMBA]) if snap is not None else None
        report(
            "seed final, production rates: the final snapshot names the Mamba surplus before SGLang's check "
            "raises",
            raised and snap is not None and snap.final and mamba is not None and mamba < 0,
            {"raised": raised, "finals": [n for n, _ in finals], "mamba_residual": mamba},
        )
    finally:
        detach(d.sched)
        shutil.rmtree(directory, ignore_errors=True)


def seed_last_word(d: Driver) -> None:
    """The probe serving (production rates, the default last-word bound) and a collector
    long-polling its endpoint as the sidecar does: the doomed rank holds until the final snapshot
    was handed over, so the collector has it before SGLang's check raises."""
    directory = tempfile.mkdtemp(prefix="poolwatch-lastword-")
    collector: LongPoll | None = None
    try:
        d.new("prefill", config=_deployed(d, directory, serve=True))
        d.loop()  # the first hook: the endpoint starts
        probe: Any = d.probe
        assert probe.publisher is not None
        assert probe.publisher.server is not None
        collector = LongPoll(probe.publisher.server.url, ensure_secret(directory))
        collector.start()
        attended = collector.wait_attended(probe.publication)
        _to_idle_check(d)
        handed = list(collector.snapshots)  # what the collector had when SGLang's check ran
        raised = _raises(d)
        finals = [snap for snap in handed if snap.final]
        mamba = residual(Pool.MAMBA, finals[-1].pools[Pool.MAMBA]) if finals else None
        report(
            "seed final, probe serving: the collector was handed the final snapshot naming the Mamba surplus "
            "before SGLang's check raised (the last word waited)",
            attended and raised and probe.last_word is Outcome.COLLECTED and mamba is not None and mamba < 0,
            {
                "attended": attended,
                "raised": raised,
                "last_word": str(probe.last_word),
                "seqs_handed": [snap.seq for snap in handed],
                "mamba_residual": mamba,
            },
        )
    finally:
        if collector is not None:
            collector.stop()
        detach(d.sched)
        shutil.rmtree(directory, ignore_errors=True)

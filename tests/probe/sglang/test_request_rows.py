"""SGLang's request rows are a watched pool: a request that finishes in its first prefill under mixed
chunk frees its KV but keeps its ``req_to_token`` row (S23: PR #10871 / #10833) -- a row no live request
holds.  The probe's ``req`` account shows it as a deficit at once, busy or idle, and the detector pages
PoolwatchSlotLeak on the ``req`` pool in rows; the same rank with the row returned stays quiet."""

from __future__ import annotations

from tests.probe.sglang.setups import by_hand

from poolwatch.conservation import gap
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.detector import Detector
from poolwatch.detect.families.balance import SLOT_LEAK
from poolwatch.model.rank import Pool
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank

CONFIG = by_hand(census_interval_s=60.0)


def finished_in_first_prefill(keeps_row: bool) -> Rank:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.running("a", origin=10, outputs=2)
    done = rank.running("short", origin=4, outputs=1)
    rank.sched.running_batch.reqs.remove(done)
    done.finished_reason = "length"
    rank.alloc.free(rank.rows.req_to_token[done.req_pool_idx, :4].to(rank.alloc.free_pages.dtype))
    if done.mamba_pool_idx is not None:
        rank.mamba.free(done.mamba_pool_idx)
    if not keeps_row:
        rank.rows.free_slots.append(done.req_pool_idx)
    return rank


def run(keeps_row: bool) -> tuple[int, list[str]]:
    clock = FakeClock()
    rank = finished_in_first_prefill(keeps_row)
    probe = new_probe(SGLANG, rank.sched, CONFIG, environ={"POOLWATCH_WORKER": "u0"}, clock=clock, wall=clock)
    detector = Detector(DetectorConfig(), clock)
    texts: list[str] = []
    for _ in range(5):
        clock.advance(1.0)
        snap = probe.sample_now()
        assert snap is not None
        detector.observe(snap)
        texts += [
            a.annotations["description"]
            for a in detector.evaluate()
            if a.name == SLOT_LEAK and dict(a.labels).get("pool") == "req"
        ]
    return gap(snap.pools[Pool.REQ]) or 0, texts


def test_a_row_kept_by_a_request_finished_in_its_first_prefill_pages_a_leak_of_rows() -> None:
    rows_gap, texts = run(keeps_row=True)
    assert rows_gap == 1
    assert texts
    assert "1 request row" in texts[-1]


def test_the_same_rank_with_the_row_returned_stays_quiet() -> None:
    assert run(keeps_row=False) == (0, [])

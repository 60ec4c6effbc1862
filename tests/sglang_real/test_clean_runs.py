"""No false alarm on a long clean run of any real SGLang release the probe and guard tiers run
(issue 39): every workload of ``check_clean.py`` -- a full KV + Mamba rank with shared prefixes,
chunked prefill, aborts, retractions and eviction; a PD prefill rank sending each prompt's KV; a
dense PD decode rank whose finished requests SGLang's own offload manager releases (released
without the offload on 0.5.10 - 0.5.12, whose offload frees KV still decoding: S29); a dense rank
with HiCache (``HiRadixCache``, or from 0.5.19 the unified tree's host pool group), its prefixes
evicted to host and loaded back; a dense rank with EAGLE speculative decoding (spec v2: the
release's own decode preparation over-allocating past the committed KV -- the draft input's
``allocate_lens`` on 0.5.5.post3, the request's ``kv_allocated_len`` on 0.5.6 - 0.5.13, from 0.5.17
``alloc_for_spec_decode`` over ``req.kv``, page-aligned -- 1 - 4 tokens accepted per step, at page 4
and page 1) -- runs 2,000
loop turns (1,000 s of the detector's clock) on the release's own pools and tree with the probe
sampling at every hook, and neither the probe nor any detector family says anything, and SGLang's
own idle check passes at the end."""

from __future__ import annotations

import pytest

from rigs.sglang.releases import RELEASES as TABLE
from rigs.sglang.releases import SpecPath, Tier, release
from tests.tiers import passed

WORKLOADS = {"clean_hybrid", "clean_pd_prefill", "clean_pd_decode", "clean_hicache", "clean_spec"}
RELEASES = tuple(r.version for r in TABLE if {Tier.PROBE, Tier.GUARD} & r.tiers)  # oldest first


def skips(version: str) -> set[str]:
    """The workloads the rig cannot drive on ``version``: a PD decode rank, and speculative decoding,
    without kv_allocated_len (0.5.4.post1: its decode is the seed's tier; spec v2's over-allocation
    has nowhere to be recorded).  HiCache runs on every release: ``HiRadixCache`` up to 0.5.17, the
    unified tree's host pool group from 0.5.19; spec v2 on every other release, through the
    release's own spec path (``Release.spec``)."""
    r = release(version)
    unsupported = {"clean_pd_decode": not r.kv_lens}
    unsupported["clean_spec"] = r.spec is SpecPath.NONE  # (check_clean_spec.why_not says why)
    return {name for name, out in unsupported.items() if out}


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_no_finding_and_no_alert_on_long_clean_runs(version: str) -> None:
    ran = passed(release(version).venv(), "tests.sglang_real.check_clean", version, checks=WORKLOADS)
    skipped = {r["check"] for r in ran.results if isinstance(r["detail"], dict) and "skipped" in r["detail"]}
    assert skipped == skips(version), ran.results
    for result in ran.results:
        if result["check"] not in skipped:
            assert result["detail"]["turns"] >= 2000, result
            assert result["detail"]["alerts"] == {}, result
            assert result["detail"]["sglang_idle_check"] == "passed", result
    hicache = next(r["detail"] for r in ran.results if r["check"] == "clean_hicache")
    if "skipped" not in hicache:  # the host side was exercised: evictions to host, load-backs, host evictions
        assert min(hicache["evicted_to_host"], hicache["load_backs"], hicache["host_evicted"]) > 0, hicache
    spec = next(r["detail"] for r in ran.results if r["check"] == "clean_spec")
    if "skipped" not in spec:  # spec v2 ran: over-allocations at page 4 unaligned up to 0.5.13 and
        # page-aligned from 0.5.17, aborts, every page back
        assert (spec["page_4"]["unaligned_allocations"] == 0) == release(version).spec.page_aligned, spec
        assert min(spec["page_4"]["aborted"], spec["page_1"]["aborted"]) > 0, spec
        assert spec["page_4"]["kv_free_end"] == spec["page_1"]["kv_free_end"] > 0, spec

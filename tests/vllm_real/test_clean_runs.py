"""No false alarm on a long clean run of any real vLLM release of the tier (issue 39): every
workload of ``check_clean.py`` -- prefix caching with aborts, preemption, full + Mamba, async
scheduling, async speculative decoding, and both sides of P/D over vLLM's own NIXL connector --
runs 2,000 engine steps (1,000 s of the detector's clock) on the release's own scheduler with the
probe sampling at every hook, guard off and on, and neither the probe (nor guard, refusing) nor any
detector family says anything."""

from __future__ import annotations

import pytest

from rigs.vllm.releases import Tier, release, tier
from tests.tiers import passed

_RUNS = {
    "clean_prefix_aborts",
    "clean_preempting",
    "clean_hybrid",
    "clean_async",
    "clean_spec_decode",
    "clean_pd_decode",
    "clean_pd_prefill",
}
WORKLOADS = _RUNS | {f"{w}_guarded" for w in _RUNS}  # guard off, and on (no refusal either)
# what every release of the tier has: these may not be skipped (0.10.2 has no async speculative decoding)
ALWAYS = WORKLOADS - {"clean_spec_decode", "clean_spec_decode_guarded"}


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("version", tier(Tier.PROBE))
def test_no_finding_and_no_alert_on_long_clean_runs(version: str) -> None:
    ran = passed(release(version).venv(), "tests.vllm_real.check_clean", checks=WORKLOADS)
    skipped = {
        r["check"]: r["detail"]
        for r in ran.results
        if isinstance(r["detail"], dict) and "skipped" in r["detail"]
    }
    assert not skipped.keys() & ALWAYS, skipped
    for result in ran.results:
        if result["check"] not in skipped:
            assert result["detail"]["steps"] >= 2000, result
            assert result["detail"]["alerts"] == {}, result

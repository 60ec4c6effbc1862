"""The memory benchmark's shorter run in CI's hostile tier (issue 42, break 4).

Ten probes push the largest schema-valid snapshots the sidecar accepts (3.66 MB: 128 tripwires of
4,000 slot ids and 8 requests each, every answer new) as fast as it asks, for a minute, against a
real ``poolwatch serve`` in a memory cgroup holding the manifests' 256 MiB limit (as root with the
cgroup v1 memory controller; elsewhere its RSS is read alone): it is not killed, its RSS stays
under the limit, and it still answers ``/healthz``.  The ten-minute run and its
figures: ``benchmarks/bench_memory_flood.py``, docs/benchmarks.md#memory-flood.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_memory_flood.py"


def test_ten_sources_of_the_largest_snapshots_for_a_minute_stay_under_the_shipped_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("bench_memory_flood", BENCH)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_memory_flood"] = bench
    spec.loader.exec_module(bench)
    code = bench.run(10, 60.0, bench.LIMIT_MIB)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "OOM killed: False" in report
    assert "alive and answering /healthz at the end: True" in report

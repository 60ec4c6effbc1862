"""The labels that let the two paths merge and the inhibition match: the sidecar's alerts can carry
Prometheus' external labels, and a down target carries its worker from the scrape to the alert."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.detect.sidecar import seeded, settings

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.targets import TargetHealth
from poolwatch.detect.family import Tick
from poolwatch.errors import ConfigError, Reason
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.alerting import alert_labels, build_alerting
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock


def test_the_sidecars_alerts_carry_the_configured_external_labels(
    tmp_path: Path, clock: FakeClock, seed_snapshot: Snapshot
) -> None:
    store, seed = seeded(clock, seed_snapshot)
    wiring = build_alerting(settings(tmp_path, alert_labels=("prometheus=monitoring/k8s",)), store, clock)
    store.put(seed)
    (double_free,) = [a for a in wiring.evaluate() if a.name == "PoolwatchDoubleFree"]
    assert double_free.all_labels["prometheus"] == "monitoring/k8s"


@pytest.mark.parametrize("item", ["prometheus", "=monitoring/k8s", "prometheus=", "1bad=x"])
def test_a_label_that_is_not_name_equals_value_is_a_configuration_error(item: str) -> None:
    with pytest.raises(ConfigError, match="POOLWATCH_ALERT_LABELS"):
        alert_labels((item,))


def test_labels_are_read_as_name_value_pairs() -> None:
    assert alert_labels(("prometheus=monitoring/k8s", " cluster = eu-1 ")) == {
        "prometheus": "monitoring/k8s",
        "cluster": "eu-1",
    }


def test_a_down_target_carries_its_worker_from_the_scrape_to_the_alert(clock: FakeClock) -> None:
    store = SnapshotStore()
    store.record_failure("probe:prefill-0/dp0-tp0-pp0", "probe", 2.0, Reason.CONNECT, "refused", "prefill-0")
    (state,) = store.targets()
    assert state.worker == "prefill-0"
    (signal,) = TargetHealth(DetectorConfig()).signals(Tick(clock.now, targets=[state])) or ()
    assert dict(signal.labels) == {
        "source": "probe",
        "target": "probe:prefill-0/dp0-tp0-pp0",
        "worker": "prefill-0",  # what the crash inhibition matches on
    }

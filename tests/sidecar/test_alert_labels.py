"""The sidecar's alerts can carry Prometheus' external labels, so its copy and the rules' copy of
an alert keep the same labels (and Alertmanager merges them) where Prometheus adds some."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.detect.sidecar import seeded, settings
from tests.helpers import FakeClock

from poolwatch.errors import ConfigError
from poolwatch.model import Snapshot
from poolwatch.sidecar.alerting import alert_labels, build_alerting


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

"""Every alert the detector judges belongs to exactly one family, judged the way its definition says
(the mode the tracker reads from the rules); the Prometheus-only meta-alerts belong to none."""

from __future__ import annotations

from collections import Counter

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families import Families
from poolwatch.detect.rules import ALERTS
from poolwatch.detect.schema import Mode


def test_every_alert_the_detector_judges_has_one_family_of_its_mode() -> None:
    families = Families(DetectorConfig()).every()
    owners = Counter(alert for family in families for alert in family.alerts)
    assert [a for a, n in owners.items() if n > 1] == []
    judged = {a.name: a.mode for a in ALERTS if a.mode is not Mode.PROMETHEUS}
    assert set(owners) == set(judged)
    for family in families:
        assert {judged[a] for a in family.alerts} == {family.mode}, type(family).__name__


def test_the_sampled_families_are_the_sampled_alerts() -> None:
    sampled = Families(DetectorConfig()).sampled
    assert {a for family in sampled for a in family.alerts} == {
        a.name for a in ALERTS if a.mode is Mode.SAMPLED
    }

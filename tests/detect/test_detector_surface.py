"""The public surface of detection and delivery is small, pinned, and free of torch."""

from __future__ import annotations

import subprocess
import sys

import poolwatch.detect
import poolwatch.notify


def test_the_detect_package_exports_exactly_its_values() -> None:
    assert sorted(poolwatch.detect.__all__) == [
        "ALERTS", "Alert", "AlertDef", "AlertState", "Detector", "DetectorConfig", "Severity",
    ]  # fmt: skip
    assert all(hasattr(poolwatch.detect, name) for name in poolwatch.detect.__all__)


def test_the_notify_package_exports_exactly_its_receivers_and_delivery() -> None:
    assert sorted(poolwatch.notify.__all__) == [
        "AlertmanagerReceiver", "Deliverer", "DeliveryStats", "Outbox", "Receiver", "WebhookReceiver",
    ]  # fmt: skip
    assert all(hasattr(poolwatch.notify, name) for name in poolwatch.notify.__all__)


def test_the_alerting_wiring_imports_without_torch() -> None:
    code = (
        "import sys, poolwatch.notify, poolwatch.sidecar.alerting, poolwatch.artifacts.rules; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr

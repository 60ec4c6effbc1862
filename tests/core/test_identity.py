"""The one authority that names a worker and its pod (poolwatch.naming)."""

from __future__ import annotations

import pytest

from poolwatch.model.rank import Role
from poolwatch.naming import NoWorkerName, namespace_name, pod_name, target_worker, worker_name
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.settings.sidecar import Settings


def host() -> str:
    return "node-a"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"POOLWATCH_WORKER": "w", "POD_NAME": "p"}, "w"),
        ({"POD_NAME": "p"}, "p"),
        ({"POOLWATCH_WORKER": "  ", "POD_NAME": "p"}, "p"),
        ({}, "node-a"),
    ],
)
def test_a_worker_is_named_by_poolwatch_worker_then_pod_name_then_the_host(
    environ: dict[str, str], expected: str
) -> None:
    assert worker_name(environ, host) == expected


def test_the_probe_and_the_sidecar_of_one_pod_name_the_worker_alike() -> None:
    for environ in ({"POD_NAME": "decode-1"}, {}, {"POOLWATCH_WORKER": "d"}):
        sidecar = Settings.from_values({}, environ).identity.worker
        probe = (
            new_probe(SGLANG, object(), ProbeConfig(serve=False), environ=environ)
            .worker(Role.DECODE, Reading())
            .worker
        )
        assert probe == sidecar


def test_the_pod_label_comes_from_pod_name_or_the_host_name_inside_kubernetes_only() -> None:
    assert pod_name({"POOLWATCH_POD": "a", "POD_NAME": "b"}, host) == "a"
    assert pod_name({"POD_NAME": "b"}, host) == "b"
    assert pod_name({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, host) == "node-a"
    assert pod_name({}, host) == ""


def test_the_namespace_comes_from_poolwatch_namespace_then_pod_namespace() -> None:
    assert namespace_name({"POOLWATCH_NAMESPACE": "a", "POD_NAMESPACE": "b"}) == "a"
    assert namespace_name({"POD_NAMESPACE": "b"}) == "b"
    assert namespace_name({}) == ""


def test_the_settings_fill_worker_namespace_and_pod_from_the_environment() -> None:
    ident = Settings.from_env({"POD_NAME": "prefill-0", "POD_NAMESPACE": "llm"}).identity
    assert (ident.worker, ident.namespace, ident.pod) == ("prefill-0", "llm", "prefill-0")


def test_a_pods_own_source_takes_the_pods_worker_whatever_its_location_is_called() -> None:
    for kind, location in [("sglang-log", "/var/log/sglang.log"), ("sglang-metrics", "http://127.0.0.1:1")]:
        assert target_worker(kind, location, pod_worker="decode-0") == "decode-0"


def test_an_unnamed_server_is_its_address_a_probe_names_itself_and_a_log_must_be_told() -> None:
    assert target_worker("sglang-metrics", "http://prefill-0:30000") == "prefill-0:30000"
    assert target_worker("probe", "http://127.0.0.1:4") == ""
    with pytest.raises(NoWorkerName):
        target_worker("sglang-log", "/logs/sglang.log")
    assert target_worker("sglang-log", "/logs/sglang.log", given="decode-3") == "decode-3"

"""The kustomize builds are valid Kubernetes for 1.29-1.33, and the prometheus-operator objects
match their CRD schemas exactly (no unknown field survives)."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
from tests.deploy.k8s import (
    VERSIONS,
    Doc,
    core,
    operator_objects,
    validate_operator_object,
)

from rigs.stack.manifests import of_kind


@pytest.mark.parametrize("version", VERSIONS)
def test_every_built_object_is_valid_for_kubernetes(builds: dict[str, list[Doc]], version: str) -> None:
    for name, docs in builds.items():
        for doc in core(docs):
            kubernetes_validate.validate(doc, version, strict=True)
        assert core(docs), name


def test_the_native_sidecar_is_refused_before_kubernetes_1_28(builds: dict[str, list[Doc]]) -> None:
    (deployment,) = of_kind(builds["base"], "Deployment")
    with pytest.raises(ValidationError, match="restartPolicy"):
        kubernetes_validate.validate(deployment, "1.27", strict=True)


def test_strict_validation_catches_an_unknown_field(builds: dict[str, list[Doc]]) -> None:
    deployment = copy.deepcopy(of_kind(builds["base"], "Deployment")[0])
    deployment["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(ValidationError, match="restartPolicyy"):
        kubernetes_validate.validate(deployment, "1.33", strict=True)


def test_operator_objects_have_no_core_schema_but_match_their_crd(builds: dict[str, list[Doc]]) -> None:
    kinds = set()
    for docs in builds.values():
        for doc in operator_objects(docs):
            with pytest.raises(SchemaNotFoundError):
                kubernetes_validate.validate(doc, "1.33", strict=True)
            validate_operator_object(doc)
            kinds.add(doc["kind"])
    assert kinds == {"PodMonitor", "PrometheusRule", "AlertmanagerConfig"}


def test_crd_validation_catches_an_unknown_field_and_a_bad_duration(builds: dict[str, list[Doc]]) -> None:
    (monitor,) = of_kind(builds["base"], "PodMonitor")
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    with pytest.raises(AssertionError, match="fields its CRD does not know"):
        validate_operator_object(unknown)
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(ValueError, match="pattern"):
        validate_operator_object(bad)

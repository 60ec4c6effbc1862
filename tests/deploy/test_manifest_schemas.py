"""The kustomize builds are valid Kubernetes for 1.29-1.33, and the prometheus-operator objects
match their CRD schemas exactly (no unknown field survives)."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

from rigs.stack.manifests import Doc, of_kind

VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33"]
OPERATOR_GROUP = "monitoring.coreos.com"


def core(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if not d["apiVersion"].startswith(OPERATOR_GROUP)]


def operator_objects(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["apiVersion"].startswith(OPERATOR_GROUP)]


def validate_operator_object(doc: Doc) -> None:
    """Validate against the CRD model; a field the model dropped was unknown to the schema."""
    # imported here: the CRD models take ~3 s to import, paid only by the tests that use them
    from cloudcoil.models.prometheus_operator import v1, v1alpha1

    models = {f"{OPERATOR_GROUP}/v1": v1, f"{OPERATOR_GROUP}/v1alpha1": v1alpha1}
    model = getattr(models[doc["apiVersion"]], doc["kind"])
    dumped = model.model_validate(doc).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped == doc, (
        f"{doc['kind']} {doc['metadata']['name']} has fields its CRD does not know: "
        + json.dumps(doc, sort_keys=True)
    )


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

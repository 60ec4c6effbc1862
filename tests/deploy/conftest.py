"""Fixtures of the deployment tests: the kustomize builds of the base and the PD example."""

from __future__ import annotations

import pytest
from tests.deploy.k8s import KUSTOMIZATIONS

from rigs.stack.manifests import Doc, kustomize


@pytest.fixture(scope="session")
def builds() -> dict[str, list[Doc]]:
    """Every kustomization, built once per session (about 0.3 s each)."""
    return {name: kustomize(path) for name, path in KUSTOMIZATIONS.items()}

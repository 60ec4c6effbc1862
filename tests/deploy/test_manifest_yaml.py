"""Every rendered manifest and every committed YAML file loads in plain PyYAML (YAML 1.1, what most
Python tooling uses) and, where it is installed, in ruamel.yaml (YAML 1.2), not only in kubectl.

kustomize writes scalars without quotes, so a value such as an AlertmanagerConfig ``matchType: =``
comes out bare, and PyYAML reads a bare ``=`` as its ``value`` tag and refuses the document."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.k8s import KUSTOMIZATIONS
from tests.helpers import REPO

from rigs.stack.manifests import render

COMMITTED = sorted(
    {*REPO.glob("deploy/**/*.yaml"), *REPO.glob("deploy/**/*.yml"), *REPO.glob("dashboards/*.yaml")}
    - set(REPO.glob("deploy/helm/**/templates/*.yaml"))  # Go templates: their output is test_helm_chart's
)


def ruamel_docs(text: str) -> list[Any] | None:
    """The documents as ruamel.yaml reads them (its safe loader refuses a bare ``=`` as well), or
    None in a venv set up before ruamel joined the dev extras (not a dependency of the product)."""
    if importlib.util.find_spec("ruamel") is None or importlib.util.find_spec("ruamel.yaml") is None:
        return None
    ruamel = importlib.import_module("ruamel.yaml")
    return [doc for doc in ruamel.YAML(typ="safe", pure=True).load_all(text) if doc]


def check_loads(text: str) -> list[Any]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    assert docs
    other = ruamel_docs(text)
    assert other is None or other == docs
    return docs


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_rendered_manifest_loads_in_pyyaml(name: str) -> None:
    docs = check_loads(render(KUSTOMIZATIONS[name]))
    assert all(isinstance(doc, dict) and doc["kind"] for doc in docs)


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(REPO)) for p in COMMITTED])
def test_every_committed_yaml_file_loads_in_pyyaml(path: Path) -> None:
    check_loads(path.read_text(encoding="utf-8"))


def test_an_equality_matcher_leaves_match_type_to_the_operators_default() -> None:
    """What kustomize would print as a bare ``=``; the operator's default matchType is ``=``."""
    text = (REPO / "deploy/kubernetes/examples/pd/alertmanagerconfig.yaml").read_text(encoding="utf-8")
    match_types = [line.split(":", 1)[1].strip() for line in text.splitlines() if "matchType:" in line]
    assert match_types
    assert not {"=", '"="'} & set(match_types)
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.safe_load("matchType: =\n")

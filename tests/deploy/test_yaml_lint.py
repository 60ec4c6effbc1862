"""The hand-written deployment YAML passes yamllint (duplicate keys, indentation, syntax)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers import REPO
from yamllint import linter
from yamllint.config import YamlLintConfig

from poolwatch.artifacts.registry import DEPLOYABLE, render_all

CONFIG = YamlLintConfig(
    """
extends: default
rules:
  line-length: {max: 120}
  document-start: disable
  truthy: {check-keys: false}
  comments: {min-spaces-from-content: 1}
  comments-indentation: disable
"""
)
GENERATED = {  # written by `poolwatch generate` (checked by --check, amtool and the CRD models instead)
    REPO / path for path in render_all(REPO, generators=DEPLOYABLE) if path.endswith((".yaml", ".yml"))
}
HELM_TEMPLATES = set(
    REPO.glob("deploy/helm/**/templates/*.yaml")
)  # Go templates (their output: test_helm_chart)
FILES = sorted(
    {*REPO.glob("deploy/**/*.yaml"), REPO / "dashboards/kustomization.yaml"} - GENERATED - HELM_TEMPLATES
)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_the_yaml_is_clean(path: Path) -> None:
    problems = list(linter.run(path.read_text(encoding="utf-8"), CONFIG, str(path)))
    assert not problems, "\n".join(
        f"{path.name}:{p.line}:{p.column} {p.message} ({p.rule})" for p in problems
    )


def test_yamllint_catches_a_duplicate_key() -> None:
    problems = list(linter.run("a: 1\na: 2\n", CONFIG))
    assert [p.rule for p in problems] == ["key-duplicates"]

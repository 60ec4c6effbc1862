"""Fault specs parse, or fail with a clear ValueError; the registry documents every fault."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolwatch.model.rank import Pool
from poolwatch_emulator import FAULTS, FaultSpec, parse_fault
from poolwatch_emulator import faults as faults_module
from poolwatch_emulator.faults import FaultPlan


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("full-kv-leak-on-retract", FaultSpec("full-kv-leak-on-retract", at_s=0.0)),
        ("full-kv-leak-on-retract@30s", FaultSpec("full-kv-leak-on-retract", at_s=30.0)),
        ("full-kv-leak-on-retract@500ms", FaultSpec("full-kv-leak-on-retract", at_s=0.5)),
        ("full-kv-leak-on-retract@2m", FaultSpec("full-kv-leak-on-retract", at_s=120.0)),
        ("full-kv-leak-on-retract@1.5h", FaultSpec("full-kv-leak-on-retract", at_s=5400.0)),
        ("full-kv-leak-on-retract@step=500", FaultSpec("full-kv-leak-on-retract", at_step=500)),
        ("full-kv-leak-on-retract@p=0.01", FaultSpec("full-kv-leak-on-retract", probability=0.01)),
    ],
)
def test_a_fault_spec_names_a_fault_and_one_trigger(text: str, spec: FaultSpec) -> None:
    assert parse_fault(text) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-such-fault@30s", "unknown fault 'no-such-fault'"),
        ("full-kv-leak-on-retract@30", "trigger must be like"),
        ("full-kv-leak-on-retract@step=-1", "step must be a non-negative integer"),
        ("full-kv-leak-on-retract@p=0", r"p must be in \(0, 1\]"),
        ("full-kv-leak-on-retract@p=2", r"p must be in \(0, 1\]"),
        ("full-kv-leak-on-retract@p=x", "p must be a number"),
    ],
)
def test_a_bad_fault_spec_is_a_clear_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(text)


@given(st.text(max_size=60))
def test_any_text_either_parses_or_raises_value_error(text: str) -> None:
    try:
        spec = parse_fault(text)
    except ValueError:
        return
    assert spec.name in FAULTS
    assert parse_fault(str(spec)) == spec


def test_the_registry_documents_pool_sign_versions_and_the_real_issue_of_every_fault() -> None:
    doc = faults_module.__doc__ or ""
    for name, info in FAULTS.items():
        assert info.name == name
        assert name in doc
        assert Pool(info.pool) in Pool
        assert info.sign in ("surplus", "deficit")
        assert info.sglang_versions
        assert info.reference
        assert info.summary
        first_ref = info.reference.split("/")[0].split(";")[0].strip().split()[-1]
        assert first_ref.removeprefix("sglang") in doc


def test_a_timed_fault_strikes_once_at_the_first_chance_after_its_time() -> None:
    plan = FaultPlan((parse_fault("full-kv-leak-on-retract@30s"),))
    plan.now = 29.9
    assert not plan.fires("full-kv-leak-on-retract")
    plan.now = 31.0
    assert plan.fires("full-kv-leak-on-retract")
    assert not plan.fires("full-kv-leak-on-retract")
    assert plan.fired["full-kv-leak-on-retract"] == 1


def test_a_probabilistic_fault_is_deterministic_for_a_seed() -> None:
    spec = (parse_fault("full-kv-leak-on-retract@p=0.3"),)
    a, b = FaultPlan(spec, seed=7), FaultPlan(spec, seed=7)
    draws = [a.fires("full-kv-leak-on-retract") for _ in range(200)]
    assert draws == [b.fires("full-kv-leak-on-retract") for _ in range(200)]
    assert 30 < sum(draws) < 90
    assert not a.fires("swa-page-overcount")

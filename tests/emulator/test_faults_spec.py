"""Fault specs parse, or fail with a clear ValueError; the registry documents every fault."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolwatch_emulator import FAULTS, FaultSpec, catalogue, parse_fault
from poolwatch_emulator.faults import FaultPlan
from poolwatch_emulator.scenarios import SCENARIOS, scenario_config


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


def test_the_catalogue_documents_pool_sign_releases_the_real_issue_and_the_page_of_every_fault() -> None:
    doc = catalogue.__doc__ or ""
    table = doc.split("Signs:")[0]
    for name, info in FAULTS.items():
        assert info.name == name
        assert name[:30] in table  # the table's name column is 31 characters wide
        assert info.pool in catalogue.POOLS
        assert info.sign in catalogue.SIGNS
        assert set(info.needs) <= set(catalogue.FEATURES)
        assert info.sglang_versions
        assert info.summary
        assert info.pages.startswith("Poolwatch")
        assert info.urls
        assert all(u.startswith("https://github.com/") for u in info.urls)
        # every issue or PR number the reference cites is one of its links, and is in the table
        numbers = re.findall(r"#(\d+)", info.reference)
        assert numbers
        assert all(any(u.endswith("/" + n) for u in info.urls) for n in numbers), name
        assert numbers[0] in table, name
        zoo = re.match(r"[SVO]\d\d\b", info.reference)
        assert zoo is None or zoo.group(0) in table


def test_the_gap_classes_page_by_sign_and_the_blind_classes_by_their_detector() -> None:
    """A fault that unbalances the books pages as the gap's sign says; a fault that keeps them
    balanced (a counter lie, a stranded hold, a stall, a free in flight) never names a double free
    or a slot leak.  The encoder cache is a pool like the others: its surplus is a double free."""
    by_sign = {"surplus": catalogue.DOUBLE_FREE, "deficit": catalogue.SLOT_LEAK}
    for info in FAULTS.values():
        if info.pool == "host":
            assert info.pages == catalogue.HOST_GAP
        elif info.sign in by_sign:
            assert info.pages == by_sign[info.sign], info.name
        else:
            assert info.pages not in (catalogue.DOUBLE_FREE, catalogue.SLOT_LEAK), info.name


def test_every_fault_has_a_scenario_where_it_can_strike() -> None:
    assert set(SCENARIOS) == set(FAULTS)
    for name, s in SCENARIOS.items():
        assert s.version in FAULTS[name].emulated_versions, name
        scenario_config(name).check()  # the roles, release and features the fault needs


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

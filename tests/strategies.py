"""Hypothesis strategies more than one test module draws from (one-offs stay in their module).

- ``slot_counts``: one pool figure as SGLang reports it (0 to ten million slots);
- ``encodable_text(n)``: text UTF-8 can carry (no lone surrogates), as labels and log lines are;
- ``pool_accounts(figures)``: a :class:`PoolAccount` of any pool with the given figures;
- ``wire_snapshots``: any snapshot the probe↔sidecar codec must carry, every field over its range;
- ``overlapping_snapshots``: snapshots that keep landing on the same few ranks from different
  sources and boots, with figures of either sign, for what the sidecar keeps per rank.
"""

from __future__ import annotations

from typing import TypeVar

from hypothesis import strategies as st

from poolwatch.model.findings import CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Exactness, IncidentKind, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.model.snapshot import Incident, ProbeHealth, Snapshot

slot_counts = st.integers(min_value=0, max_value=10**7)


def few(elements: st.SearchStrategy[T], max_size: int) -> st.SearchStrategy[tuple[T, ...]]:
    """Tuples of at most ``max_size`` of ``elements`` (a snapshot's sequences are tuples)."""
    return st.lists(elements, max_size=max_size).map(tuple)


def encodable_text(max_size: int, *, exclude: str = "") -> st.SearchStrategy[str]:
    """Text of up to ``max_size`` characters without lone surrogates (nor ``exclude``)."""
    return st.text(
        alphabet=st.characters(exclude_categories=("Cs",), exclude_characters=exclude), max_size=max_size
    )


T = TypeVar("T")
_nothing_unreadable: st.SearchStrategy[tuple[str, ...]] = st.just(())


def pool_accounts(
    figures: st.SearchStrategy[int | None],
    unreadable: st.SearchStrategy[tuple[str, ...]] = _nothing_unreadable,
) -> st.SearchStrategy[PoolAccount]:
    """An account of any pool, each figure (size, available, ...) drawn from ``figures``."""
    return st.builds(
        PoolAccount,
        pool=st.sampled_from(Pool),
        size=figures,
        available=figures,
        evictable=figures,
        protected=figures,
        held=figures,
        session_held=figures,
        used=figures,
        exactness=st.sampled_from(Exactness),
        unreadable=unreadable,
    )


def pool_maps(accounts: st.SearchStrategy[PoolAccount]) -> st.SearchStrategy[dict[Pool, PoolAccount]]:
    """Up to four accounts keyed by pool (a later account of a pool replaces an earlier one)."""
    return st.lists(accounts, max_size=4).map(lambda xs: {a.pool: a for a in xs})


# The codec's range: figures, counters and ids are never negative; ranks fit 16 bits.
_wire_int = st.integers(min_value=0, max_value=2**40)
_wire_rank = st.integers(min_value=0, max_value=65535)
# what the wire carries as it is: text that is already inert (poolwatch.inert: the codec makes any
# control or invisible format character a visible sign, tests/core/test_codec.py)
_wire_text = st.text(alphabet=st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), max_size=20)
_wire_accounts = pool_accounts(st.none() | _wire_int, few(_wire_text, 3))
_wire_call_sites = st.none() | st.builds(
    CallSite,
    kind=st.sampled_from(CallSiteKind),
    frames=few(st.builds(Frame, file=_wire_text, line=_wire_int, function=_wire_text), 3),
    seq=_wire_int,
)

wire_snapshots = st.builds(
    Snapshot,
    worker=st.builds(
        WorkerId,
        worker=_wire_text,
        role=st.sampled_from(Role),
        dp_rank=_wire_rank,
        tp_rank=_wire_rank,
        pp_rank=_wire_rank,
    ),
    seq=_wire_int,
    taken_at=st.floats(min_value=0, max_value=2e9),
    phase=st.sampled_from(Phase),
    pools=pool_maps(_wire_accounts),
    source=_wire_text,
    queues=st.dictionaries(_wire_text, _wire_int, max_size=4),
    tripwires=few(
        st.builds(
            Tripwire,
            kind=st.sampled_from(TripwireKind),
            pool=st.sampled_from(Pool),
            slots=few(_wire_int, 4),
            first_seen_hook=_wire_text,
            seq=_wire_int,
            call_site=_wire_call_sites,
        ),
        2,
    ),
    repairs=few(
        st.builds(
            Repair,
            kind=st.sampled_from(RepairKind),
            pool=st.sampled_from(Pool),
            count=_wire_int,
            slots=few(_wire_int, 4),
            hook=_wire_text,
            seq=_wire_int,
            requests=few(_wire_text, 2),
            call_site=_wire_call_sites,
        ),
        2,
    ),
    incidents=few(
        st.builds(
            Incident,
            kind=st.sampled_from(IncidentKind),
            message=_wire_text,
            at=st.floats(0, 2e9),
            pools=few(_wire_accounts, 2),
        ),
        2,
    ),
    probe=st.none()
    | st.builds(
        ProbeHealth,
        samples_total=_wire_int,
        errors_total=_wire_int,
        last_error=_wire_text,
        sample_cost_seconds=st.floats(0, 10),
        census_cost_seconds=st.floats(0, 10),
    ),
    idle_check_strict=st.none() | st.booleans(),
    boot_id=_wire_text,
)

# Few workers, ranks, sources and boots, so that successive snapshots collide on a rank; figures of
# either sign (a surplus makes ``used`` negative) and labels that need escaping.
_label = encodable_text(6)
_signed_figure = st.none() | st.integers(min_value=-(2**41), max_value=2**41)

overlapping_snapshots = st.builds(
    Snapshot,
    worker=st.builds(
        WorkerId,
        worker=st.sampled_from(["prefill-0", "decode-1", 'odd"\\name\n']),
        role=st.sampled_from(Role),
        dp_rank=st.integers(0, 2),
        tp_rank=st.integers(0, 2),
        model=_label,
    ),
    seq=st.integers(0, 2**40),
    taken_at=st.floats(min_value=1_761_907_000.0, max_value=1_761_907_300.0),
    phase=st.sampled_from(Phase),
    pools=pool_maps(pool_accounts(_signed_figure)),
    source=st.sampled_from(["probe", "sglang-metrics", "file"]),
    queues=st.dictionaries(st.sampled_from(["waiting", "running", "inflight"]), st.integers(0, 9000)),
    tripwires=few(
        st.builds(
            Tripwire,
            kind=st.sampled_from(TripwireKind),
            pool=st.sampled_from(Pool),
            slots=few(st.integers(0, 500), 3),
        ),
        2,
    ),
    incidents=few(
        st.builds(Incident, kind=st.sampled_from(IncidentKind), message=_label, at=st.just(0.0)), 1
    ),
    probe=st.none() | st.builds(ProbeHealth, samples_total=st.integers(0, 10**9)),
    idle_check_strict=st.none() | st.booleans(),
    boot_id=st.sampled_from(["a", "b"]),
)

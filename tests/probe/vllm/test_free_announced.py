"""The holder index's account of which frees earlier pops announced: a free that is the last pop's
whole list is consumed in one comparison, everything else is counted block by block, and either way
the answers are those of counting every popped block (the model here), in any order of pops and
frees, deferred, partial, repeated or unannounced."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch.probe.vllm.holders import MAX_ANNOUNCED, MAX_EXPECTED, HolderIndex


@dataclass(frozen=True)
class Block:
    block_id: int


class Model:
    """The account counted block by block (what the index answered before the whole-list path)."""

    def __init__(self, null_id: int | None) -> None:
        self.expected: Counter[int] = Counter()
        self.null_id = null_id

    def released(self, ids: list[int]) -> None:
        self.expected.update(i for i in ids if i != self.null_id)

    def explained(self, ids: list[int]) -> bool:
        whole = True
        for i in ids:
            if self.expected[i] > 0:
                self.expected[i] -= 1
            elif i != self.null_id:
                whole = False
        self.expected += Counter()  # drop the zeros
        return whole


def _blocks(ids: list[int]) -> list[Block]:
    return [Block(i) for i in ids]


def test_a_free_of_the_list_just_popped_is_explained_and_consumed() -> None:
    index = HolderIndex()
    index.released(0, "r1", _blocks([5, 6, 7]))
    assert index.explained([7, 6, 5])  # vLLM frees the popped list reversed
    assert index.expected == {}
    index.released(0, "r2", _blocks([8, 9]))
    assert index.explained([8, 9])  # or in order
    assert index.expected == {}


def test_a_deferred_free_is_explained_after_other_pops() -> None:
    index = HolderIndex()
    index.released(0, "late", _blocks([1, 2]))  # popped now, freed when its fence passes
    index.released(0, "r1", _blocks([5, 6]))
    assert index.explained([6, 5])
    assert index.expected == {1: 1, 2: 1}
    assert index.explained([2, 1])
    assert index.expected == {}


def test_a_free_no_pop_announced_is_not_explained() -> None:
    index = HolderIndex()
    index.released(0, "r1", _blocks([5, 6]))
    assert not index.explained([6, 5, 4])
    assert not index.explained([5])  # consumed already by the free before
    assert index.expected == {}


def test_the_null_block_is_never_expected_nor_missing() -> None:
    index = HolderIndex()
    index.null_id = 0
    index.released(1, "w", _blocks([0, 0, 11, 12]))  # a window's list, padded with the null block
    assert index.expected == {11: 1, 12: 1}
    assert index.explained([12, 11, 0, 0])
    assert index.expected == {}


def test_pops_never_freed_are_counted_by_block_past_the_bound() -> None:
    index = HolderIndex()
    for n in range(MAX_ANNOUNCED + 5):
        index.released(0, f"r{n}", _blocks([n]))
    assert len(index._announced) == MAX_ANNOUNCED
    assert index.expected == dict.fromkeys(range(MAX_ANNOUNCED + 5), 1)


def test_the_popped_blocks_kept_for_their_free_stay_bounded() -> None:
    index = HolderIndex()
    big = MAX_EXPECTED // 4 + 1
    for n in range(6):  # long requests popped and never freed (a leak)
        index.released(0, f"r{n}", _blocks(list(range(n * big, (n + 1) * big))))
    assert index._waiting == sum(map(len, index._announced)) <= MAX_EXPECTED
    assert len(index.expected) <= MAX_EXPECTED


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("pop"), st.lists(st.integers(0, 12), min_size=0, max_size=6)),
        st.tuples(st.just("free_last"), st.booleans()),  # the last popped list, reversed or not
        st.tuples(st.just("free"), st.lists(st.integers(0, 12), min_size=0, max_size=6)),
        st.tuples(st.just("look"), st.none()),  # the free path check reads the expected blocks
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, null=st.sampled_from([None, 0]))
def test_the_index_answers_as_counting_every_popped_block(
    ops: list[tuple[str, object]], null: int | None
) -> None:
    index, model = HolderIndex(), Model(null)
    index.null_id = null
    popped: list[list[int]] = []
    for op, arg in ops:
        if op == "pop":
            ids = list(arg)  # type: ignore[call-overload]
            popped.append(ids)
            index.released(0, f"r{len(popped)}", _blocks(ids))
            model.released(ids)
        elif op == "look":
            assert index.expected == dict(model.expected)
        else:
            if op == "free_last":
                ids = list(popped[-1]) if popped else []
                ids = ids[::-1] if arg else ids
            else:
                ids = list(arg)  # type: ignore[call-overload]
            assert index.explained(ids) == model.explained(ids)
        assert index._waiting == sum(map(len, index._announced))
    assert index.expected == dict(model.expected)

"""The columns the tree took of a held row (guard v2, ``guard.takes``): noted at an insertion made
for a request, read back from a row view or a view of the insertion's value, forgotten with the row."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from poolwatch.probe.sglang.guard.takes import Takes, overlap


def test_overlap_is_the_owned_part_of_a_call_relative_to_its_first_column_merged() -> None:
    assert overlap([(0, 4), (2, 6), (10, 12)], 3, 8) == [(0, 3), (7, 8)]
    assert overlap([(0, 0)], 0, 5) == []
    assert overlap([(0, 2), (4, 6)], 1, 4) == [(0, 1), (3, 4)]


def _insert(takes: Takes, req: Any, value: Any, prefix_len: int, frees: list[Any]) -> list[Any]:
    """``cache_*_req(req)`` inserting ``value`` (the row's copy from column 0); ``frees``: what the
    insertion frees meanwhile, each read back through ``in_insert``."""
    seen: list[Any] = []

    def cache(r: Any) -> None:
        params = SimpleNamespace(value=value)
        takes.begin(params)
        seen.extend(takes.in_insert(t, int(t.numel())) for t in frees)
        takes.end(params, SimpleNamespace(prefix_len=prefix_len))

    takes.cache(cache)(req)
    return seen


def test_an_insertion_notes_the_columns_it_kept_and_its_duplicates_read_back_to_the_row() -> None:
    req = SimpleNamespace(req_pool_idx=3, rid="r")
    takes = Takes(lambda r: r.req_pool_idx)
    value = torch.arange(100, 132)
    assert _insert(takes, req, value, 8, []) == []
    assert takes.ranges(3, req) == [(8, 32)]
    assert takes.ranges(3, SimpleNamespace(req_pool_idx=3)) == []  # another holder: not its columns
    again = torch.arange(100, 140)
    assert _insert(takes, req, again, 40, [again[16:24], torch.arange(4)]) == [(req, 3, 16), None]
    takes.forget([3])
    assert takes.ranges(3, req) == []


def test_an_insertion_outside_a_request_s_caching_notes_nothing() -> None:
    takes = Takes(lambda r: r.req_pool_idx)
    params = SimpleNamespace(value=torch.arange(8))
    takes.begin(params)
    assert takes.in_insert(params.value[2:4], 2) is None
    takes.end(params, SimpleNamespace(prefix_len=0))
    assert takes.taken == {}

"""The full-KV identity census: free pages vs tree pages vs pages live requests own.

The full pool has up to millions of slots, so the sets stay on the allocator's device: a
``bincount`` of the free list finds duplicates and out-of-range ids, boolean marks of the tree's
values and of each live request's private ``req_to_token`` columns find overlaps, and only the
offending ids (at most ``MAX_IDS`` of each) and counts come back to the host.  Ids are pages
(``token // page_size``) for a paged allocator, slots otherwise; slot/page 0 is SGLang's padding.
Of the SWA allocator pair only the sliding-window free list is censused, for duplicate and
out-of-range ids (a page freed twice); ownership of SWA pages goes through SGLang's full-to-SWA
index mapping and is not checked (its counts are still read by ``readers``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS, MAX_LEAK_IDS, MAX_RETURN, PoolCensus, busy_lost
from poolwatch.probe.census.readings import CounterReading
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.sglang.counter_census import full_readings
from poolwatch.probe.sglang.footprint import full_private_range
from poolwatch.probe.sglang.mamba_census import rid_of, tree_values
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.sessions import kv_span
from poolwatch.probe.sglang.shapes import Shape
from poolwatch.probe.sglang.unreleased import allocated_len, live_tails

__all__ = ["kv_census"]


def _free_ids(alloc: Any) -> Any:
    import torch

    get_all = getattr(alloc, "get_all_free_pages", None)
    if callable(get_all):
        return get_all()
    parts = [alloc.free_pages]
    release = getattr(alloc, "release_pages", None)
    if release is not None:
        parts.append(release)
    return torch.cat([p.reshape(-1).to(torch.int64) for p in parts])


def _live_tokens(sched: Any, shape: Shape, page: int, live: LiveSet) -> list[Any]:
    """The slots live requests own privately: one gathered tensor on an accelerator, where a
    slice per request is a kernel launch each; one slice per request on the CPU, where a slice is
    a plain copy and long spans make the gather's index arithmetic the dearer one (measured at
    256 requests: 2.4 ms sliced vs 10.3 ms gathered for 4,000 tokens each, 1.2 vs 0.1 ms for a
    few tokens each; the census runs every few minutes, and in SGLang the table is on the GPU)."""
    import torch

    table = sched.req_to_token_pool.req_to_token
    spans = [span for _, span in _spans(shape, page, live)]
    if table.device.type != "cpu" and len(spans) > 1:
        return [_gather_spans(table, spans)]
    return [table[row, start:end].to(torch.int64) for row, start, end in spans]


def _spans(shape: Shape, page: int, live: LiveSet) -> list[tuple[str, tuple[int, int, int]]]:
    """``(owner, (row, start, end))`` of every live request's private columns and every parked
    streaming-session slot's (``session:<id>``), the empty ones left out.  With pages, the columns
    read end at ``kv_allocated_len`` (what the engine wrote), not at the page boundary the held
    count rounds it to: past it the row holds what its earlier owners left, and the last written
    slot's page is the partial page already."""
    out = []
    for req in live.holders:
        span = full_private_range(req, shape, page, live)
        if span is not None and page > 1:
            span = _written(span, allocated_len(req, shape))
        if span is not None and span[2] > span[1]:
            out.append((rid_of(req), span))
    for name, record in live.sessions:
        span = kv_span(record, page)
        if span is not None and page > 1:
            span = _written(span, int(record.kv_allocated_len))
        if span is not None and span[2] > span[1]:
            out.append((name, span))
    return out


def _written(span: tuple[int, int, int], allocated: int | None) -> tuple[int, int, int]:
    row, start, end = span
    return span if allocated is None else (row, start, min(end, allocated))


def _gather_spans(table: Any, spans: list[tuple[int, int, int]]) -> Any:
    """``table[row, start:end]`` of every span, concatenated, in a fixed number of launches: one
    small host-to-device copy of the spans, then index arithmetic (the output sizes are known on
    the host, so nothing waits for the device)."""
    import torch

    lengths = [end - start for _, start, end in spans]
    total = sum(lengths)
    meta = torch.tensor([[r for r, _, _ in spans], [s for _, s, _ in spans], lengths], dtype=torch.int64)
    rows, starts, counts = meta.to(table.device)
    before = torch.cumsum(counts, 0) - counts  # where each span begins in the output
    row_idx = torch.repeat_interleave(rows, counts, output_size=total)
    shift = torch.repeat_interleave(before - starts, counts, output_size=total)
    col_idx = torch.arange(total, device=table.device) - shift
    return table[row_idx, col_idx].to(torch.int64)


def _mark(ids: Any, n: int, device: Any) -> Any:
    import torch

    marks = torch.zeros(n, dtype=torch.bool, device=device)
    if ids.numel():
        marks[ids.clamp(0, n - 1)] = True
    return marks


def _host(ids: Any, limit: int = MAX_IDS) -> tuple[int, ...]:
    return tuple(int(i) for i in ids[:limit].tolist())


def _to_pages(tokens: list[Any], page: int, device: Any) -> Any:
    import torch

    if not tokens:
        return torch.empty((0,), dtype=torch.int64, device=device)
    flat = torch.cat([t.reshape(-1).to(torch.int64).to(device) for t in tokens])
    return torch.unique(flat // page) if page > 1 else flat


def kv_census(
    sched: Any, shape: Shape, reading: Reading, live: LiveSet, *, idle: bool, lost: int | None = None
) -> PoolCensus | None:
    """The full pool's census (the SWA free list's, on a hybrid SWA model), or ``None`` for an
    allocator it does not know (unified).  ``lost``: the sample's exact deficit (slots) while busy;
    the pages in no set are then named when they account for exactly that deficit (see
    :func:`~poolwatch.probe.census.proofs.busy_lost`)."""
    alloc = reading.attr(sched, "token_to_kv_pool_allocator")
    if alloc is MISSING:
        return None
    swa = getattr(alloc, "swa_attn_allocator", None)
    if swa is not None and hasattr(swa, "free_pages"):
        return reading.guard("census.swa", lambda: _swa_census(swa), None)
    if hasattr(alloc, "full_attn_allocator") or not hasattr(alloc, "free_pages"):
        return None
    hybrid = hasattr(alloc, "full_attn_allocator") or reading.attr(
        sched, "req_to_token_pool.mamba_pool", optional=True
    ) not in (MISSING, None)
    found = reading.guard(
        "census.full", lambda: _census(sched, alloc, shape, live, reading, idle=idle, lost=lost), None
    )
    if found is None:
        return None
    none: tuple[CounterReading, ...] = ()
    counted = reading.guard(
        "census.full.counters", lambda: full_readings(sched, shape, live, reading, hybrid=hybrid), none
    )
    return replace(found, counter_readings=counted) if counted else found


def _swa_census(alloc: Any) -> PoolCensus:
    """Duplicates and out-of-range ids on the sliding-window free list (pages)."""
    import torch

    page = int(getattr(alloc, "page_size", 1) or 1)
    count, first = int(alloc.size) // page, 1
    free = _free_ids(alloc)
    in_range = (free >= first) & (free < count + first)
    counts = torch.bincount(free[in_range], minlength=count + first)
    return PoolCensus(
        pool=Pool.SWA,
        size=count,
        first_id=first,
        free=int(free.numel()),
        tree=0,
        live=0,
        duplicates=_host(torch.nonzero(counts > 1).reshape(-1)),
        free_and_live=(),
        free_and_tree=(),
        out_of_range=_host(torch.unique(free[~in_range])),
        missing=None,
        page_size=page,
    )


def _census(
    sched: Any, alloc: Any, shape: Shape, live: LiveSet, reading: Reading, *, idle: bool, lost: int | None
) -> PoolCensus:
    import torch

    page = int(getattr(alloc, "page_size", 1) or 1)
    count, first = int(alloc.size) // page, 1
    free = _free_ids(alloc)
    device, n = free.device, count + first
    tree = _to_pages(tree_values(sched.tree_cache, "all_values_flatten", "value"), page, device)
    held = _to_pages(_live_tokens(sched, shape, page, live), page, device)
    in_range = (free >= first) & (free < n)
    counts = torch.bincount(free[in_range], minlength=n)
    on_free = counts > 0
    tree_marks, live_marks = _mark(tree, n, device), _mark(held, n, device)
    live_tree = torch.nonzero(live_marks & tree_marks).reshape(-1)
    seen = on_free | tree_marks | live_marks
    tail = live_tails(sched, shape, page, live, seen, first, lost, reading)
    missing = None
    if idle or lost:
        unseen = ~seen
        unseen[:first] = False
        if tail.every:  # a live request's, past its release: named as unreleased, not missing
            unseen[torch.tensor(tail.every, dtype=torch.int64, device=device)] = False
        missing = torch.nonzero(unseen).reshape(-1)
        rest = None if lost is None else lost - tail.count * page
        if not idle and not busy_lost(int(missing.numel()), page, rest):
            missing = None  # in flight somewhere the census does not look: no proof
    return PoolCensus(
        pool=Pool.FULL,
        size=count,
        first_id=first,
        free=int(free.numel()),
        tree=int(tree.numel()),
        live=int(held.numel()),
        duplicates=_host(torch.nonzero(counts > 1).reshape(-1)),
        free_and_live=_host(torch.nonzero(on_free & live_marks).reshape(-1)),
        free_and_tree=_host(torch.nonzero(on_free & tree_marks).reshape(-1)),
        out_of_range=_host(torch.unique(free[~in_range])),
        missing=None if missing is None else _host(missing, MAX_LEAK_IDS),
        missing_count=None if missing is None else int(missing.numel()),
        missing_ids=() if missing is None else _host(missing, MAX_RETURN),
        page_size=page,
        live_and_tree=_host(live_tree),
        owners={
            **tail.owners,
            **(_owners(sched, shape, page, live, _host(live_tree)) if live_tree.numel() else {}),
        },
        unreleased=tail.ids,
        unreleased_count=tail.count,
    )


def _owners(
    sched: Any, shape: Shape, page: int, live: LiveSet, ids: tuple[int, ...]
) -> dict[int, tuple[str, ...]]:
    """The live requests (and parked session slots) whose private columns hold each of ``ids``
    (pages): a second pass over them, only when a census names ids they hold."""
    wanted = set(ids)
    table = sched.req_to_token_pool.req_to_token
    held: dict[int, list[str]] = {}
    for owner, span in _spans(shape, page, live):
        tokens = table[span[0], span[1] : span[2]].tolist()
        for unit in {int(t) // page for t in tokens} & wanted if page > 1 else set(map(int, tokens)) & wanted:
            held.setdefault(unit, []).append(owner)
    return {unit: tuple(rids) for unit, rids in sorted(held.items())}

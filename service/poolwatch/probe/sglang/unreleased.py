"""What a live request's books leave out: KV allocated to it past its recorded allocation.

From 0.5.5.post3 SGLang records what a request was allocated in ``kv_allocated_len`` (``req.kv``
from 0.5.17) and frees by it: when the request finishes, the tree takes (or frees) the committed
part and ``release_kv_cache`` frees the over-allocation ``[ceil_page(commit), kv_allocated_len)`` --
a slice of the request's ``req_to_token`` row, so it stops at the row's end -- and a paged allocator
gives back whole pages; the next decode allocation starts at ``kv_allocated_len`` too, writing the
row from there.  The row's columns the request's books account for are ``[0, end)``, ``end =
min(ceil_page(kv_allocated_len), width)``.

An allocation the lengths leave out is allocated, held by nobody the census sees, and freed by no
release: a paged speculative over-allocation that never reaches ``kv_allocated_len`` (S10,
sglang#13741 / PR #13826, PR #31616) lies in the row past ``end`` (until the next allocation writes
over it, and it is lost either way); a draft reserve wider than the row (S11, PR #26972) lies past
the row's end, where the engine's flat write put it (the next row's memory: ``row * width +
column``).  The full-KV census reads the columns ``[end, max(end, tokens) + reach)`` of every live
request
through that flat view (``reach``: twice a decode step's over-allocation, from the scheduler's
``server_args``, past the larger of ``end`` and the request's token count; :data:`TAIL_REACH` where
they do not say) and names the pages there that are on no free list, in no tree node and in no live request's
private range -- *unreleased*: allocated to that request, lost at its release or its next
allocation, named with it before either happens.

Past a request's own extent a row still holds what its earlier owners left; a page found there that
is free, in the tree or another request's is stale and ignored.  A stale entry could also point at
a page allocated where the census does not look while busy, so pages inside the row are named only
when the sample's exact deficit is at least their slots (an unrecorded allocation is missing from
the held count, so it shows in the gap); pages past the row's end need no such proof (the lengths
already say the release's slice cannot reach them).

Cost: the census only, never the sample.  Without an exact deficit only what lies past a row's end
is read -- nothing for a request far from its row's end -- so a healthy census gathers nothing; with
one (the census a new gap forces), one gather of the tail columns of every live request (one launch
on an accelerator) and Python ints per request for the spans.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from poolwatch.probe.census.proofs import MAX_IDS
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.footprint import full_private_range
from poolwatch.probe.sglang.mamba_census import rid_of
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.shapes import HeldRule, Shape

__all__ = [
    "TAIL_REACH",
    "Tail",
    "Unreleased",
    "allocated_len",
    "live_tails",
    "reach_of",
    "release_end",
    "tails",
    "unreleased",
]

# Tokens past a request's extent the census reads where the scheduler's server args do not say:
# above SGLang's largest over-allocation (spec v2's reserve, 2 x topk x whole pages per branch).
TAIL_REACH = 2048
_NO_LENGTHS = HeldRule.SEQLEN  # 0.5.4: no kv_allocated_len, nothing to compare with


@dataclass(frozen=True, slots=True)
class Tail:
    """The flat positions past a live request's release end the census reads."""

    owner: str
    start: int  # flat index into req_to_token (row * width + column)
    end: int
    beyond: int  # flat index where the row ends (positions from here are past the row)


@dataclass(frozen=True, slots=True)
class Unreleased:
    """Pages allocated to live requests past what their release frees (the first ``MAX_IDS``)."""

    ids: tuple[int, ...]
    count: int
    owners: dict[int, tuple[str, ...]]
    every: tuple[int, ...] = ()  # all of them (the census leaves them out of ``missing``)

    @classmethod
    def none(cls) -> Unreleased:
        return cls((), 0, {})


def _ceil(n: int, page: int) -> int:
    return -(-n // page) * page if page > 1 else n


def allocated_len(req: Any, shape: Shape) -> int | None:
    """The request's ``kv_allocated_len``; ``None`` on a family without it, or once released (0.5.17)."""
    rule = shape.held_rule
    if rule is _NO_LENGTHS:
        return None
    record = req.kv if rule in (HeldRule.REQ_KV, HeldRule.KV_LENGTHS) else req
    return None if record is None else int(record.kv_allocated_len)


def release_end(req: Any, shape: Shape, page: int) -> int | None:
    """The column the request's books account for up to (before the row's end clamps it):
    ``ceil_page(kv_allocated_len)``; ``None`` on a family without it, or once released (0.5.17)."""
    allocated = allocated_len(req, shape)
    return None if allocated is None else _ceil(allocated, page)


def reach_of(server_args: Any, page: int) -> int:
    """Columns past a request's extent the census reads: twice what one decode step allocates past
    the committed KV (spec v2 tops a request up to ``kv_committed_len + 2 * get_alloc_len_per_decode``;
    with page > 1 and topk > 1 each branch takes whole pages), plus a page; :data:`TAIL_REACH` where
    the scheduler's ``server_args`` do not say."""
    if server_args is None or not hasattr(server_args, "speculative_algorithm"):
        return TAIL_REACH
    if server_args.speculative_algorithm is None:
        per_decode = 1
    else:
        steps = int(getattr(server_args, "speculative_num_steps", None) or 1)
        topk = int(getattr(server_args, "speculative_eagle_topk", None) or 1)
        drafts = int(getattr(server_args, "speculative_num_draft_tokens", None) or 1)
        branch = _ceil(page - 1 + steps, page) if page > 1 and topk > 1 else steps
        per_decode = max(branch * topk, drafts)
    return _ceil(2 * per_decode + page, page)


def tails(live: LiveSet, shape: Shape, page: int, width: int, reach: int = TAIL_REACH) -> list[Tail]:
    """The flat positions past each live request's release end, up to ``reach`` columns past the
    larger of that end and its token count (``width``: the row's width)."""
    if shape.held_rule is _NO_LENGTHS:
        return []
    out = []
    for req in live.holders:
        if full_private_range(req, shape, page, live) is None:
            continue  # no row: nothing allocated to it, nothing to release
        end = release_end(req, shape, page)
        if end is None:
            continue
        row = int(req.kv.req_pool_idx if shape.held_rule is HeldRule.REQ_KV else req.req_pool_idx)
        extent = max(end, _ceil(len(req.origin_input_ids) + len(req.output_ids), page))
        base = row * width
        out.append(
            Tail(rid_of(req), base + min(end, width), base + extent + _ceil(reach, page), base + width)
        )
    return out


def unreleased(
    table: Any, spans: list[Tail], seen: Any, page: int, first: int, lost: int | None
) -> Unreleased:
    """The pages at ``spans`` of ``table`` (``req_to_token``) that ``seen`` (a boolean mark per page
    id: free, tree or live, on the table's device) does not mark, with the requests whose tails
    hold them.  Pages inside a row are read only when ``lost`` (the sample's exact deficit, slots)
    may account for them; without a deficit only what lies past a row's end is read (usually
    nothing: a healthy census pays for no gather)."""
    import torch

    flat = table.reshape(-1)
    if not (lost is not None and lost > 0):
        spans = [replace(s, start=max(s.start, s.beyond)) for s in spans]
    spans = [s for s in spans if s.start < min(s.end, flat.numel())]
    if not spans:
        return Unreleased.none()
    counts = torch.tensor([min(s.end, flat.numel()) - s.start for s in spans], dtype=torch.int64)
    meta = torch.tensor([[s.start for s in spans], [s.beyond for s in spans]], dtype=torch.int64)
    total = int(counts.sum())
    which = torch.repeat_interleave(torch.arange(len(spans)), counts, output_size=total)
    at = torch.arange(total) - (torch.cumsum(counts, 0) - counts - meta[0])[which]
    past_row = at >= meta[1][which]
    ids = flat[at.to(flat.device)].to(torch.int64)
    ids = ids // page if page > 1 else ids
    n = int(seen.numel())
    unseen = ((ids >= first) & (ids < n) & ~seen[ids.clamp(0, n - 1)]).cpu()
    found = ids.cpu()[unseen].tolist()
    return _named(found, which[unseen].tolist(), spans, past_row[unseen].tolist(), page, lost)


def _named(
    ids: list[int], which: list[int], spans: list[Tail], past: list[bool], page: int, lost: int | None
) -> Unreleased:
    owners: dict[int, list[str]] = {}
    for unit, i in zip(ids, which, strict=True):
        names = owners.setdefault(unit, [])
        if spans[i].owner not in names:
            names.append(spans[i].owner)
    inside = {u for u, p in zip(ids, past, strict=True) if not p} - {
        u for u, p in zip(ids, past, strict=True) if p
    }
    if inside and (lost is None or len(inside) * page > lost):
        owners = {u: o for u, o in owners.items() if u not in inside}  # the deficit cannot account for them
    units = sorted(owners)
    named = units[:MAX_IDS]
    return Unreleased(tuple(named), len(units), {u: tuple(owners[u]) for u in named}, tuple(units))


def live_tails(
    sched: Any,
    shape: Shape,
    page: int,
    live: LiveSet,
    seen: Any,
    first: int,
    lost: int | None,
    reading: Reading,
) -> Unreleased:
    """The full-KV census's call: the pages ``live`` requests were allocated past what their release
    frees, read from the scheduler's ``req_to_token``; a failure is noted and names none."""
    table = sched.req_to_token_pool.req_to_token

    def find() -> Unreleased:
        reach = reach_of(getattr(sched, "server_args", None), page)
        spans = tails(live, shape, page, int(table.shape[1]), reach)
        return unreleased(table, spans, seen, page, first, lost) if spans else Unreleased.none()

    return reading.guard("census.unreleased", find, Unreleased.none())

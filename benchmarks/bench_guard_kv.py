"""The cost guard v2 adds to a KV free and to a request row's ``alloc`` + ``free``, per release
family's shape, on the emulator's pools (``bench_guard.py --free-path``).  Figures only.

A KV free through a request's ``req_to_token`` row pays the released-row check (which row the view
reads, and whether the row book holds it free); a free of another tensor pays the view test alone;
a request row's ``alloc`` + ``free`` pays the row book's upkeep.  Each figure is the fastest of
several rounds (:func:`bench_guard_free.fastest`), guard off (a bare rank) and on (a rank with the
refuser installed) interleaved.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from bench_guard_free import fastest

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch_emulator.allocator import TokenToKVPoolAllocator
from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["kv_table"]

KV_SHAPES = (  # label, family, first row, free(req)
    ("0.5.4, 0.5.5.post3, 0.5.6", "0.5.6", 0, False),
    ("0.5.9, 0.5.10", "0.5.10", 0, True),
    ("0.5.12", "0.5.12", 1, True),
    ("0.5.23", "0.5.23", 1, True),
)


def _kv_rank(family: str, first: int, by_req: bool, guard: bool) -> tuple[Any, FreeRefuser | None, int]:
    """A rank with 64 request rows (63 held) and a 65,536-slot KV pool; one held row is returned."""
    pool = ReqToTokenPool(64, 256, first_row=first, free_by_req=by_req)
    sched = SimpleNamespace(req_to_token_pool=pool, token_to_kv_pool_allocator=TokenToKVPoolAllocator(65536))
    refuser = FreeRefuser(sched, lambda *refused: None, paths=GUARD_PATHS[family]) if guard else None
    if refuser is not None:
        refuser.install()
    rows = pool.alloc(63)
    assert rows is not None
    return sched, refuser, rows[0]


def _kv_rows(label: str, family: str, first: int, by_req: bool) -> list[str]:
    (bare, _, row_off), (sched, refuser, row_on) = (_kv_rank(family, first, by_req, g) for g in (False, True))
    assert refuser is not None
    assert refuser.kv is not None

    def pair(s: Any, r: int) -> Callable[[], None]:
        view = s.req_to_token_pool.req_to_token[r, :8]

        def run() -> None:
            s.req_to_token_pool.write(r, 0, s.token_to_kv_pool_allocator.alloc(8))
            s.token_to_kv_pool_allocator.free(view)

        return run

    def rows(s: Any) -> Callable[[], None]:
        pool = s.req_to_token_pool
        req = SimpleNamespace(req_pool_idx=None, mamba_pool_idx=None)

        def run() -> None:
            (req.req_pool_idx,) = pool.alloc(1) or [None]
            pool.free(req if by_req else req.req_pool_idx)

        return run

    kv = refuser.kv
    held = sched.req_to_token_pool.req_to_token[row_on, :8]
    other = held.clone()
    out = []
    off, on = [], []
    for _ in range(3):  # interleaved: the machine's load drifts
        off.append(fastest(pair(bare, row_off)))
        on.append(fastest(pair(sched, row_on)))
    check = fastest(lambda: kv._owned(Pool.FULL, "bench", held))
    out.append(
        f"| {label} | `free` through a held row (a release) | {min(off):.2f} | {min(on):.2f} | {check:.2f} |"
    )
    check = fastest(lambda: kv._owned(Pool.FULL, "bench", other))
    out.append(f"| {label} | `free` of another tensor (an eviction) | -- | -- | {check:.2f} |")
    off, on = [], []
    for _ in range(3):
        off.append(fastest(rows(bare)))
        on.append(fastest(rows(sched)))
    out.append(
        f"| {label} | request row `alloc` + `free` (the row book) | {min(off):.2f} | {min(on):.2f} | -- |"
    )
    return out


def kv_table() -> str:
    rows = [
        "| family shape | KV path | guard off: pair, µs | guard on: pair, µs | the check alone, µs |",
        "|---|---|---|---|---|",
    ]
    for label, family, first, by_req in KV_SHAPES:
        rows += _kv_rows(label, family, first, by_req)
    return "\n".join(rows)

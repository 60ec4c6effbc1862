"""The cost guard v2 adds to one Mamba ``free`` (``bench_guard.py --free-path``).  Figures only.

The pool is the emulator's ``MambaPool`` (a torch int64 free list on the CPU, as SGLang's on the
device); the wrapper is the one the probe installs (:class:`~poolwatch.probe.sglang.refuse.FreeRefuser`).
Each figure is the fastest of several rounds (the machine's other load only adds) of ``alloc(1)``
+ ``free`` pairs, less the same pair on a bare pool of the same size, in µs per free; the check
alone (the wrapper's decision, without the pool's ``free``) is timed the same way.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from poolwatch.probe.sglang.refuse import FreeRefuser
from poolwatch_emulator.radix import TreeNode
from poolwatch_emulator.req_pool import MambaPool

__all__ = ["free_path_table"]

PAIRS, ROUNDS = 2000, 7


class _Req:
    def __init__(self, slot: Any) -> None:
        self.rid, self.mamba_pool_idx = "long", slot

    def finished(self) -> bool:
        return False


def _tree(pool: MambaPool, nodes: int) -> Any:
    root = TreeNode()
    for i in range(nodes):
        node = TreeNode(root)
        node.mamba_value = pool.alloc(1)
        root.children[i] = node
    return SimpleNamespace(root_node=root)


def _pairs(pool: MambaPool) -> float:
    started = time.perf_counter()
    for _ in range(PAIRS):
        pool.free(pool.alloc(1))
    return (time.perf_counter() - started) / PAIRS


def _per_free(pool: MambaPool, bare: MambaPool) -> tuple[float, float]:
    """The fastest round of each, rounds interleaved (the machine's load drifts): (wrapped, bare) µs."""
    wrapped, plain = [], []
    for _ in range(ROUNDS):
        wrapped.append(_pairs(pool))
        plain.append(_pairs(bare))
    return min(wrapped) * 1e6, min(plain) * 1e6


def _bare_like(pool: MambaPool) -> MambaPool:
    bare = MambaPool(pool.size)
    bare.alloc(pool.size - pool.available_size())  # the same free-list length
    return bare


def _check_only(refuser: FreeRefuser, pool: MambaPool) -> float:
    ids = pool.alloc(1)
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(PAIRS):
            refuser._keep(ids)
        rounds.append((time.perf_counter() - started) / PAIRS)
    pool.free(ids)
    return min(rounds) * 1e6


def _setup(nodes: int, chunked: bool) -> tuple[MambaPool, FreeRefuser]:
    pool = MambaPool(nodes + 64)
    sched = SimpleNamespace(req_to_token_pool=SimpleNamespace(mamba_pool=pool), chunked_req=None)
    sched.tree_cache = _tree(pool, nodes)
    if chunked:
        sched.chunked_req = _Req(pool.alloc(1))
    refuser = FreeRefuser(sched, lambda slots, requests, where: None)
    refuser.install()
    refuser.refresh()
    return pool, refuser


def free_path_table() -> str:
    rows = [
        "| guard | state at the free | alloc(1)+free pair, µs (bare pool) | the check alone, µs |",
        "|---|---|---|---|",
        "| off | nothing installed (the bare pool's own free) | -- | 0 |",
    ]
    for label, nodes, chunked in (
        ("no chunked request, empty tree", 0, False),
        ("a live chunked request, empty tree", 0, True),
        ("a live chunked request, 64 tree nodes indexed", 64, True),
        ("a live chunked request, 1,024 tree nodes indexed", 1024, True),
    ):
        pool, refuser = _setup(nodes, chunked)
        wrapped, bare = _per_free(pool, _bare_like(pool))
        check = _check_only(refuser, pool)
        rows.append(
            f"| on | {label} | {wrapped:.2f} ({bare:.2f}) | {check:.2f} (refused: {refuser.refused}) |"
        )
    return "\n".join(rows)

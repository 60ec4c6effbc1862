"""The cost guard v2 adds to one free, per release family's shape (``bench_guard.py --free-path``), its
refusals on healthy emulated soaks, and (``--real``) the same decisions on each release's own classes.
Figures only.

The pools are the emulator's (a torch int64 free list on the CPU, as SGLang's on the device), laid
out as each family frees (:data:`~poolwatch.probe.sglang.guard.paths.GUARD_PATHS`):

* 0.5.4 / 0.5.5.post3 / 0.5.6: ``mamba_pool.free(ids)``, ids from 0;
* 0.5.9 / 0.5.10 / 0.5.12: the same (ids from 1) and ``free_mamba_cache(req)``;
* 0.5.23: ``mamba_allocator.free(ids)`` (ids from 1; no tree proof) and ``free_mamba_cache(req)``
  with the working slot at ``req.kv.mamba_pool_idx``.

The wrapper is the one the probe installs (:class:`~poolwatch.probe.sglang.guard.refuser.FreeRefuser`);
the KV paths' table is ``bench_guard_kv.py``'s, the real classes' ``bench_guard_releases.py``'s.
Each figure is the fastest of several rounds (the machine's other load only adds) of an
``alloc(1)`` + free pair, in µs: guard off is the bare pool (nothing is installed), guard on the
wrapped one of the same free-list length, rounds interleaved; the check alone is the wrapper's
decision without the pool's free (for ``free_mamba_cache``: its own decision plus the id check of
the free it makes).  On a loaded machine the pair figures differ by more than the check between
rounds; the check alone is the figure to read.  The soak is :func:`rigs.emulated.soak.soak` (heavy
fault-free PD traffic, guard on) on each release the emulator reproduces.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.refuser import FreeRefuser
from poolwatch_emulator.radix import TreeNode
from poolwatch_emulator.req_pool import MambaPool

__all__ = ["fastest", "free_path_table", "soak_table"]

PAIRS, ROUNDS = 2000, 7
SHAPES = (  # label, family, first id, free_mamba_cache wrapped
    ("0.5.4, 0.5.5.post3, 0.5.6", "0.5.6", 0),
    ("0.5.9, 0.5.10, 0.5.12", "0.5.12", 1),
    ("0.5.23", "0.5.23", 1),
)


class _Req:
    def __init__(self, rid: str, slot: Any) -> None:
        self.rid, self.mamba_pool_idx = rid, slot
        self.kv = SimpleNamespace(mamba_pool_idx=slot)  # 0.5.23's ReqKvInfo

    def finished(self) -> bool:
        return False


class _ReqPool:
    """The request pool's Mamba side: the slot allocator under the family's name, and
    ``free_mamba_cache(req)`` (free the working slot, clear the pointer)."""

    def __init__(self, size: int, first_id: int, allocator: str) -> None:
        self.allocator = allocator
        setattr(self, allocator, MambaPool(size, first_id=first_id))

    def slots(self) -> MambaPool:
        pool: MambaPool = getattr(self, self.allocator)
        return pool

    def free_mamba_cache(self, req: Any) -> None:
        self.slots().free(req.mamba_pool_idx)
        req.mamba_pool_idx = req.kv.mamba_pool_idx = None


def _flatten(values: list[Any]) -> Any:
    import torch

    return torch.cat(values) if values else torch.empty((0,), dtype=torch.int64)


def fastest(fn: Callable[[], object]) -> float:
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(PAIRS):
            fn()
        rounds.append((time.perf_counter() - started) / PAIRS)
    return min(rounds) * 1e6


def _id_pair(pool: _ReqPool) -> Callable[[], None]:
    slots = pool.slots()
    return lambda: slots.free(slots.alloc(1))


def _request_pair(pool: _ReqPool) -> Callable[[], None]:
    other = _Req("other", None)

    def pair() -> None:
        other.mamba_pool_idx = other.kv.mamba_pool_idx = pool.slots().alloc(1)
        pool.free_mamba_cache(other)

    return pair


def _setup(family: str, first: int, nodes: int, chunked: bool) -> tuple[_ReqPool, _ReqPool, FreeRefuser]:
    paths = GUARD_PATHS[family]
    pool, bare = (_ReqPool(nodes + 64, first, paths.mamba.allocator) for _ in range(2))
    root = TreeNode()
    for i in range(nodes):
        node = TreeNode(root)
        node.mamba_value = pool.slots().alloc(1)
        root.children[i] = node
    bare.slots().alloc(nodes)
    values = [n.mamba_value for n in root.children.values()]
    tree = SimpleNamespace(root_node=root, all_mamba_values_flatten=lambda: _flatten(values))
    sched = SimpleNamespace(req_to_token_pool=pool, chunked_req=None, tree_cache=tree)
    if chunked:
        sched.chunked_req = _Req("long", pool.slots().alloc(1))
        bare.slots().alloc(1)
    refuser = FreeRefuser(sched, lambda *refused: None, paths=paths)
    refuser.install()
    refuser.refresh()
    return pool, bare, refuser


def _rows(label: str, family: str, first: int) -> list[str]:
    out = []
    request = GUARD_PATHS[family].mamba.request_free
    allocator = GUARD_PATHS[family].mamba.allocator
    for state, nodes, chunked in (
        ("no chunked request, empty tree", 0, False),
        ("a live chunked request, empty tree", 0, True),
        ("a live chunked request, 1,024 tree nodes", 1024, True),
    ):
        pool, bare, refuser = _setup(family, first, nodes, chunked)
        probe = pool.slots().alloc(1)
        guard = refuser.mamba
        assert guard is not None
        check = fastest(lambda p=probe, g=guard: g.keep(p))
        pool.slots().free(probe)
        wrapped, plain = [], []
        for _ in range(3):  # interleaved: the machine's load drifts
            wrapped.append(fastest(_id_pair(pool)))
            plain.append(fastest(_id_pair(bare)))
        out.append(
            f"| {label} | `{allocator}.free` | {state} | {min(plain):.2f} | {min(wrapped):.2f} "
            f"| {check:.2f} | {refuser.refused} |"
        )
        if request and nodes == 0:
            other = _Req("other", probe)
            both = fastest(lambda o=other, p=probe, r=refuser, g=guard: r._refuse_request(o) or g.keep(p))
            off, on = fastest(_request_pair(bare)), fastest(_request_pair(pool))
            out.append(
                f"| {label} | `free_mamba_cache(req)` | {state} (another request's) | {off:.2f} | {on:.2f} "
                f"| {both:.2f} | {refuser.refused} |"
            )
    return out


def free_path_table() -> str:
    rows = [
        "| family shape | wrapped path | state at the free | guard off: pair, µs | guard on: pair, µs "
        "| the check alone, µs | refused |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, family, first in SHAPES:
        rows += _rows(label, family, first)
    rows.append("\nguard off installs nothing: the check costs 0 there (the pair is the bare pool's own).")
    return "\n".join(rows)


def soak_table(minutes: float) -> str:
    """Healthy emulated soaks with guard on: ranks wrapped, slots refused, slots repaired."""
    from rigs.emulated.soak import soak

    rows = [
        "| release | simulated min | ranks wrapped | refused | repairs | alerts | crashed | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for version, seed in (("0.5.4.post1", 21), ("0.5.9", 22), ("0.5.12", 23)):
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            r = soak(version, seed, minutes / 60, tmp, True)
        rows.append(
            f"| {version} | {r.hours * 60:.0f} | {r.refusing} | {r.refused} | {r.repairs} | {len(r.alerts)} "
            f"| {len(r.crashed)} | {time.monotonic() - started:.0f} |"
        )
    return "\n".join(rows)

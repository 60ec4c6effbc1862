"""Every SGLang leak-report format, written as each release writes it, from figures; and the sign
the figures give (the truth a reading of the written report must never contradict).

A :class:`Report` is the lines of one report in their log context (a crash's traceback, a warning
line, Python's ``warnings`` output, 0.1.x's prefixless lines) and each pool's true gap:
``size - available - evictable - protected - held - session_held`` over the terms the family's
check counts, ``None`` where a counter that cannot be right (a negative term, ``protected`` above
the pool) makes every sign unproven.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from poolwatch.model.rank import Pool

PREFIX = "[2026-01-01 00:00:00 TP0] "
CRASH = [
    PREFIX + "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2797, in run_scheduler',
    "    raise ValueError(message)",
]
AFTER = [PREFIX + "Decode batch, #running-req: 0, #token: 0, token usage: 0.00, #queue-req: 0"]


@dataclass(frozen=True)
class Figures:
    size: int
    available: int
    evictable: int = 0
    protected: int = 0
    held: int = 0
    session_held: int = 0

    def gap(self, terms: tuple[str, ...]) -> int | None:
        values = {t: getattr(self, t) for t in terms}
        if any(v < 0 for v in values.values()) or values.get("protected", 0) > self.size:
            return None  # a counter that cannot be right: no sign is true
        return self.size - sum(values.values())


@dataclass(frozen=True)
class Report:
    family: str
    before: list[str]  # the lines before the report (its context)
    lines: list[str]  # the report's own lines
    after: list[str]
    truth: dict[Pool, int | None]  # per pool: the true gap (None: no sign is true)
    busy: bool = False


Writer = Callable[[dict[Pool, Figures]], Report]
_KV = "ValueError: token_to_kv_pool_allocator memory leak detected!"
_ALL = ("available", "evictable", "protected", "held", "session_held")


def _v01(f: dict[Pool, Figures]) -> Report:
    full = f[Pool.FULL]
    lines = [
        f"/x/model_rpc.py:259: UserWarning: Warning: available_size={full.available}, "
        f"max_total_num_token={full.size}",
        "KV cache pool leak detected!",
        "  warnings.warn(",
    ]
    return Report("kv-warning-0.1", ["new fill batch. #seq: 1. #cached_token: 0. #running_req: 0"], lines, [],
                  {Pool.FULL: full.gap(("available",))})  # fmt: skip


def _v02(f: dict[Pool, Figures]) -> Report:
    req = f[Pool.REQ]
    lines = [
        f"/x/tp_worker.py:318: UserWarning: Warning: available req slots={req.available}, "
        f"total slots={req.size}",
        "Memory pool leak detected!",
    ]
    return Report("req-warning-0.2", [], lines, [], {Pool.REQ: req.gap(("available",))})


def _v03(f: dict[Pool, Figures]) -> Report:
    full = f[Pool.FULL]
    line = (
        f"/x/scheduler.py:710: UserWarning: KV cache pool leak detected!available_size={full.available}, "
        f"self.max_total_num_tokens={full.size}"
    )
    return Report("kv-warning-0.3", [PREFIX + "Prefill batch. #new-seq: 1, token usage: 0.00, #queue-req: 0"],
                  [line], AFTER, {Pool.FULL: full.gap(("available",))})  # fmt: skip


def _v046(f: dict[Pool, Figures]) -> Report:
    full = f[Pool.FULL]
    lines = [
        f"{_KV} available_size={full.available + full.evictable}, protected_size={full.protected}, "
        f"self.max_total_num_tokens={full.size}",
        f"self.token_to_kv_pool_allocator.available_size()={full.available}",
        f"self.tree_cache.evictable_size()={full.evictable}",
    ]
    truth = full.gap(("available", "evictable", "protected"))
    if full.available + full.evictable < 0:
        truth = None
    return Report("kv-allocator-0.4.6", CRASH, lines, AFTER, {Pool.FULL: truth})


def _req(f: dict[Pool, Figures]) -> Report:
    req = f[Pool.REQ]
    line = (
        f"{PREFIX}req_to_token_pool memory leak detected!available_size={req.available}, "
        f"session_held={req.session_held}, total_size={req.size}"
    )
    return Report("req-pool-0.4.6", [], [line], AFTER, {Pool.REQ: req.gap(("available", "session_held"))})


def _radix(f: dict[Pool, Figures]) -> Report:
    full = f[Pool.FULL]
    line = (
        f"{_KV} self.max_total_num_tokens={full.size}, "
        f"available_size={full.available}, evictable_size={full.evictable}, protected_size={full.protected}"
    )
    return Report("kv-allocator-0.5", CRASH, [line], AFTER, {Pool.FULL: full.gap(_ALL[:3])})


def _swa(f: dict[Pool, Figures]) -> Report:
    full, swa = f[Pool.FULL], f[Pool.SWA]
    lines = [
        f"{_KV} self.full_tokens_per_layer={full.size}, "
        f"full_available_size={full.available}, full_evictable_size={full.evictable}, "
        f"self.tree_cache.full_protected_size()={full.protected}",
        f"self.swa_tokens_per_layer={swa.size}, swa_available_size={swa.available}, "
        f"swa_evictable_size={swa.evictable}, self.tree_cache.swa_protected_size()={swa.protected}",
    ]
    return Report(
        "kv-allocator-0.5", CRASH, lines, AFTER, {p: f[p].gap(_ALL[:3]) for p in (Pool.FULL, Pool.SWA)}
    )


def _mamba(f: dict[Pool, Figures]) -> Report:
    full, mamba = f[Pool.FULL], f[Pool.MAMBA]
    lines = [
        f"ValueError: token_to_kv_pool_allocator memory leak detected! full_available_size={full.available}, "
        f"full_evictable_size={full.evictable}, self.token_to_kv_pool_allocator.size={full.size}, "
        f"self.tree_cache.full_protected_size()={full.protected}",
        f"mamba_available_size={mamba.available}, mamba_evictable_size={mamba.evictable}, "
        f"self.req_to_token_pool.mamba_pool.size={mamba.size}, self.tree_cache.mamba_protected_size()="
        f"{mamba.protected}, leaked_full_pages=None, leaked_mamba_pages={{7}}",
    ]
    return Report(
        "kv-allocator-0.5", CRASH, lines, AFTER, {p: f[p].gap(_ALL[:3]) for p in (Pool.FULL, Pool.MAMBA)}
    )


def _tagged(tag: str, g: Figures) -> str:
    return (
        f"[{tag}] total={g.size}, available={g.available}, evictable={g.evictable}, protected={g.protected}, "
        f"session_held={g.session_held}, uncached={g.held}"
    )


def _pools(f: dict[Pool, Figures]) -> Report:
    lines = [
        PREFIX + "pool memory leak detected! " + _tagged("full", f[Pool.FULL]),
        _tagged("swa", f[Pool.SWA]),
        _tagged("mamba", f[Pool.MAMBA]) + ", leaked_full_pages=None, leaked_mamba_pages={0}",
    ]
    truth = {p: f[p].gap(_ALL) for p in (Pool.FULL, Pool.SWA, Pool.MAMBA)}
    return Report("pools-0.5.12", [], lines, AFTER, truth)


def _pools_0523(f: dict[Pool, Figures]) -> Report:
    lines = [
        "ValueError: pool memory leak detected! " + _tagged("full", f[Pool.FULL]),
        _tagged("mamba-active", f[Pool.MAMBA]),
        _tagged("mamba-int8", f[Pool.MAMBA_CKPT]),
    ]
    truth = {p: f[p].gap(_ALL) for p in (Pool.FULL, Pool.MAMBA, Pool.MAMBA_CKPT)}
    return Report("pools-0.5.12", CRASH, lines, AFTER, truth)


def _busy_pools(f: dict[Pool, Figures]) -> Report:
    line = "AssertionError: SWA Pool Mem Leak Detected! " + _tagged("swa", f[Pool.SWA])
    return Report("busy-pools-0.5.12", CRASH, [line], AFTER, {Pool.SWA: f[Pool.SWA].gap(_ALL)}, busy=True)


def _busy(f: dict[Pool, Figures]) -> Report:
    full = f[Pool.FULL]
    accounted = full.available + full.evictable + full.protected + full.held
    line = f"AssertionError: Mem Leak Detected! total_tokens={accounted} "
    line += f"vs self.max_total_num_tokens={full.size}"
    truth = None if accounted < 0 else full.size - accounted
    return Report("busy-0.5.4", CRASH, [line], AFTER, {Pool.FULL: truth}, busy=True)


WRITERS: tuple[Writer, ...] = (
    _v01, _v02, _v03, _v046, _req, _radix, _swa, _mamba, _pools, _pools_0523, _busy_pools, _busy,
)  # fmt: skip


def field_ends(lines: list[str]) -> list[tuple[int, int]]:
    """Where a report may be cut at a field boundary: (line, column) after each ``, `` separator and
    at each line's end -- the report then ends there (an excerpt's end, a lost rest)."""
    ends: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        column = line.find(", ")
        while column >= 0:
            ends.append((i, column + 1))  # the field and its comma, nothing after
            column = line.find(", ", column + 2)
        ends.append((i, len(line)))
    return ends


def cut(lines: list[str], at: tuple[int, int]) -> list[str]:
    line, column = at
    return [*lines[:line], lines[line][:column]]


def wrap(lines: list[str], width: int) -> list[str]:
    """What a terminal ``width`` columns wide shows: each line cut every ``width`` characters."""
    return [line[i : i + width] for line in lines for i in range(0, max(len(line), 1), width)]

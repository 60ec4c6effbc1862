"""SGLang's own ``/metrics`` and ``/get_server_info``, turned into coarse pool accounts.  Pure.

What each release exports (reference §5.1), per scheduler rank (labels ``tp_rank``,
``pp_rank``, ``dp_rank`` when DP, ``engine_type``, ``model_name``)::

    sglang:{kv,swa,mamba}_{available,evictable,used}_tokens   0.5.12+: raw counts of each pool
    sglang:num_used_tokens                                     every release: full pool used
    sglang:mamba_usage / sglang:swa_token_usage                ratios (0.5.4.post3+ for mamba)

From 0.5.12 a pool's size is ``available + evictable + used`` exactly (SGLang derives ``used``
from them); before, sizes come from ``/get_server_info`` (``max_total_num_tokens``, and
``max_mamba_cache_size`` of each DP rank's internal state).  A ratio becomes a count only when
ratio x size is a whole number; otherwise only its sign is certain (below 0: a surplus of at
least one slot).  Protected and held are never exported, so every account is coarse.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from poolwatch import releases
from poolwatch.model.rank import Pool, PoolAccount, Role
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.prom_text import Sample

__all__ = [
    "RankGauges",
    "ServerInfo",
    "group_by_rank",
    "parse_server_info",
    "pool_accounts",
    "queues",
    "wanted",
]

_PREFIX = "sglang:"
_TRIPLES = {Pool.FULL: "kv", Pool.SWA: "swa", Pool.MAMBA: "mamba"}
_RATIOS = {Pool.SWA: "swa_token_usage", Pool.MAMBA: "mamba_usage"}
_QUEUES = {
    "num_running_reqs": "running",
    "num_queue_reqs": "waiting",
    "num_grammar_queue_reqs": "grammar",
    "num_prefill_prealloc_queue_reqs": "bootstrap",  # renamed in 0.5.12
    "num_prefill_bootstrap_queue_reqs": "bootstrap",
    "num_prefill_inflight_queue_reqs": "inflight",
    "num_decode_prealloc_queue_reqs": "prealloc",
    "num_decode_transfer_queue_reqs": "transfer",
    "num_decode_host_receive_queue_reqs": "host_receive",
    "num_decode_deferred_kv_release_reqs": "deferred_release",
}
_POOL_GAUGES = {
    "num_used_tokens",
    "max_total_num_tokens",
    *(f"{t}_{f}_tokens" for t in _TRIPLES.values() for f in ("available", "evictable", "used")),
    *_RATIOS.values(),
}
_WANTED = {_PREFIX + n for n in (*_POOL_GAUGES, *_QUEUES)}
_ROLES = {"prefill": Role.PREFILL, "decode": Role.DECODE}
_WHOLE = 1e-6


def wanted(name: str) -> bool:
    """The SGLang metric names this module reads."""
    return name in _WANTED


@dataclass(slots=True)
class RankGauges:
    """The gauges of one scheduler rank (metric name without ``sglang:`` -> value)."""

    values: dict[str, float] = field(default_factory=dict)
    model: str = ""
    role: Role | None = None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str = ""
    role: Role | None = None
    full_size: int | None = None
    mamba_sizes: Mapping[int, int] = field(default_factory=dict)  # DP rank -> slots


def group_by_rank(samples: Iterable[Sample]) -> dict[Ranks, RankGauges]:
    """Samples grouped by rank; queue gauges split by other labels (priority) are summed."""
    ranks: dict[Ranks, RankGauges] = {}
    for s in samples:
        key = Ranks(_label_int(s, "dp_rank"), _label_int(s, "tp_rank"), _label_int(s, "pp_rank"))
        gauges = ranks.setdefault(key, RankGauges())
        name = s.name.removeprefix(_PREFIX)
        summed = name in _QUEUES and name in gauges.values
        gauges.values[name] = gauges.values[name] + s.value if summed else s.value
        gauges.model = gauges.model or s.labels.get("model_name", "")
        gauges.role = gauges.role or _ROLES.get(s.labels.get("engine_type", ""))
    return ranks


def _label_int(s: Sample, name: str) -> int:
    raw = s.labels.get(name, "0")
    return int(raw) if raw.isdigit() and len(raw) <= 5 else 0  # a 5,000-digit "rank" is no rank


def queues(g: RankGauges) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, queue in _QUEUES.items():
        value = g.values.get(name)
        if value is not None and math.isfinite(value):
            out[queue] = out.get(queue, 0) + int(min(max(value, 0.0), 2.0**53))
    return out


def pool_accounts(g: RankGauges, info: ServerInfo, dp_rank: int) -> dict[Pool, PoolAccount]:
    """What the gauges prove about each pool the rank has."""
    accounts: dict[Pool, PoolAccount] = {}
    for pool in (Pool.FULL, Pool.SWA, Pool.MAMBA):
        account = _from_triple(g, pool) or _from_legacy(g, pool, info, dp_rank)
        if account is not None:
            accounts[pool] = account
    return accounts


def _from_triple(g: RankGauges, pool: Pool) -> PoolAccount | None:
    names = [f"{_TRIPLES[pool]}_{f}_tokens" for f in ("available", "evictable", "used")]
    figures = [_whole(g.values.get(n)) for n in names]
    if any(f is None for f in figures):
        return None
    available, evictable, used = (int(f or 0) for f in figures)
    size = available + evictable + used
    return PoolAccount(pool, size, available, evictable, used=used) if size > 0 else None


def _from_legacy(g: RankGauges, pool: Pool, info: ServerInfo, dp_rank: int) -> PoolAccount | None:
    if pool is Pool.FULL:
        gauge = _whole(g.values.get("max_total_num_tokens"))
        size = int(gauge) if gauge is not None and gauge > 0 else info.full_size
        used = _whole(g.values.get("num_used_tokens"))
        return None if used is None else PoolAccount(pool, size, used=int(used))
    ratio = g.values.get(_RATIOS[pool])
    size = info.mamba_sizes.get(dp_rank) if pool is Pool.MAMBA else None
    if ratio is None or not math.isfinite(ratio) or (ratio == 0 and size is None):
        return None  # SGLang sets every ratio, 0 for pools the model does not have
    return PoolAccount(pool, size, used=_count(ratio, size))


def _count(ratio: float, size: int | None) -> int | None:
    if size is not None:
        count = _whole(ratio * size)
        if count is not None:
            return int(count)
    return -1 if ratio < 0 else None  # below 0: a surplus of at least one slot


def _whole(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    nearest = round(value)
    return float(nearest) if abs(value - nearest) <= _WHOLE * max(1.0, abs(value)) else None


def parse_server_info(doc: Any) -> ServerInfo:
    """Sizes and version from ``/get_server_info``; absent or odd fields are left unknown."""
    if not isinstance(doc, Mapping):
        return ServerInfo()
    states = doc.get("internal_states")
    mamba: dict[int, int] = {}
    for dp, state in enumerate(states if isinstance(states, list) else []):
        size = state.get("max_mamba_cache_size") if isinstance(state, Mapping) else None
        if _is_count(size):
            mamba[dp] = size
    full = doc.get("max_total_num_tokens")
    version = doc.get("version")
    return ServerInfo(
        version=releases.shown(version),
        role=_ROLES.get(str(doc.get("disaggregation_mode", ""))),
        full_size=full if _is_count(full) else None,
        mamba_sizes=mamba,
    )


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

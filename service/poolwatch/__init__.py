"""poolwatch: memory-pool conservation monitoring for SGLang.

The public surface is small on purpose; everything else is private to its module.
"""

from __future__ import annotations

from poolwatch.conservation import Balance, Finding, assess, assess_snapshot, describe, gap
from poolwatch.model import Phase, Pool, PoolAccount, Role, Snapshot, WorkerId

__version__ = "0.1.0"

__all__ = [
    "Balance",
    "Finding",
    "Phase",
    "Pool",
    "PoolAccount",
    "Role",
    "Snapshot",
    "WorkerId",
    "__version__",
    "assess",
    "assess_snapshot",
    "describe",
    "gap",
]

"""The per-target caps of the sidecar: how much one snapshot, metrics page or discovery directory
may hold before it is refused, as one frozen value with its defaults and allowed ranges.

A target past a cap is rejected with a bounded reason (``schema`` or ``too_large`` on that
target, or a skipped discovery file), never a larger memory footprint for everyone: with the
defaults one rank costs at most a few hundred series (its pools are a fixed set, its queues at
most ``max_queues``, its tripwires at most ``max_listed``), one ``/metrics`` page at most
``max_page_ranks`` ranks.  :class:`poolwatch.settings.sidecar.Settings` exposes every field as a
``POOLWATCH_*`` variable and a flag (``limits`` group); the parsers take a :class:`Limits` and
default to :data:`DEFAULT_LIMITS`.  Stdlib only: the probe's contract modules import it.

=========================  =========  ==============================================  ============
field                      default    what                                            range
=========================  =========  ==============================================  ============
max_queues                 32         queues one snapshot may name                    1-4,096
max_listed                 1,024      tripwires, repairs or incidents in one snapshot  1-65,536
max_page_samples           10,000     wanted samples read from one engine's page       100-10^7
max_page_ranks             512        scheduler ranks one engine's page may show       1-65,536
max_discovery_file_bytes   65,536     size of one discovery file                      1,024-16 MiB
max_discovery_files        1,024      discovery files read per scan                   1-100,000
max_log_ranks              1,024      scheduler ranks one engine's log may name       1-65,536
=========================  =========  ==============================================  ============
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["DEFAULT_LIMITS", "RANGES", "Limits", "LimitError"]


class LimitError(ValueError):
    """A cap outside its range; the message names the ``POOLWATCH_*`` variable."""


RANGES: dict[str, tuple[int, int]] = {
    "max_queues": (1, 4096),
    "max_listed": (1, 65536),
    "max_page_samples": (100, 10_000_000),
    "max_page_ranks": (1, 65536),
    "max_discovery_file_bytes": (1024, 16 << 20),
    "max_discovery_files": (1, 100_000),
    "max_log_ranks": (1, 65536),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps one target's data must stay within (see the module's table)."""

    max_queues: int = 32  # SGLang has a handful (waiting, running, prefill/decode transfer queues)
    max_listed: int = 1024
    max_page_samples: int = 10_000  # SGLang shows a few dozen per rank
    max_page_ranks: int = 512  # TP x PP x DP of one server
    max_discovery_file_bytes: int = 64 * 1024  # a discovery file is ~200 bytes
    max_discovery_files: int = 1024
    max_log_ranks: int = 1024  # TP x PP x DP of one server writing one log; more are dropped

    def __post_init__(self) -> None:
        for f in fields(self):
            value, (low, high) = getattr(self, f.name), RANGES[f.name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise LimitError(f"POOLWATCH_{f.name.upper()}: must be within {low}..{high}, got {value!r}")


DEFAULT_LIMITS = Limits()

"""The table of SGLang's log message formats, per release family.  Pure data.

Read from the released wheels' source (``pip download --no-deps sglang==X``: 0.1.16, 0.2.15,
0.3.6, 0.4.0, 0.4.3.post2, 0.4.6.post5, 0.5.0rc2, 0.5.2, 0.5.3, 0.5.4.post1, 0.5.9, 0.5.12,
0.5.23) and from public issue threads that quote them; ``tests/fixtures/sglang-logs/PROVENANCE.md``
names, for each format, the file of a release and the threads.  Only the shapes are recorded
here: the marker, where its figures are and how to read them.

Two things differ between families and matter for the figures:

* before 0.5.0 the idle check's ``available_size`` already *includes* the evictable slots
  (``allocator.available_size() + tree_cache.evictable_size()``); 0.4.6 adds the two parts on
  the following lines.  Subtracting evictable again would report a wrong gap;
* in 0.1.x-0.2.x the figures are on the line *before* the marker (``Warning: available_size=…,
  max_total_num_token=…`` then ``KV cache pool leak detected!``), and the request-slot check
  spells its fields ``available req slots=…, total slots=…``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.model.rank import IncidentKind, Pool

__all__ = ["BATCH_HEADS", "CRASH_MARKERS", "LEAK_FORMATS", "LeakFormat", "ROLE_KEYS"]


@dataclass(frozen=True, slots=True)
class LeakFormat:
    """One self-check message of SGLang: its marker and how to read its figures."""

    name: str
    releases: str  # the release family that writes it
    kind: IncidentKind
    marker: re.Pattern[str]
    figures_before: bool = False  # the figures are on the line before the marker (0.1-0.2)
    pool: Pool | None = None  # every figure belongs to this pool (None: named by the field)
    available_includes_evictable: bool = False  # a bare ``available_size`` counts evictable slots
    aliases: Mapping[str, str] = field(default_factory=dict)  # field names with spaces -> figure
    prefixed: bool = True  # every release that writes it prefixes its lines with ranks (0.2.x on)
    # the figures every release of the family states for each pool, in the order it prints them:
    # a pool's report lacking one was cut (its figures are then read as unknown, never 0)
    figures: tuple[str, ...] = ()


_KV = IncidentKind.LEAK_DETECTED
_BUSY = IncidentKind.BUSY_CHECK_FAILED
_TREE = IncidentKind.TREE_SANITY_FAILED
_TAGGED_FIGURES = ("size", "available", "evictable", "protected", "session_held", "held")  # [pool] lines

# First match wins: the specific shapes come before the general ones.
LEAK_FORMATS: tuple[LeakFormat, ...] = (
    LeakFormat(
        "kv-warning-0.1",
        "0.1.x-0.2.x",
        _KV,
        re.compile(r"KV cache pool leak detected!\s*$"),
        figures_before=True,
        pool=Pool.FULL,
        available_includes_evictable=True,
        prefixed=False,  # 0.1.x wrote no prefix at all
        figures=("available_with_evictable", "size"),
    ),
    LeakFormat(
        "req-warning-0.2",
        "0.2.x",
        _KV,
        re.compile(r"Memory pool leak detected!\s*$"),
        figures_before=True,
        pool=Pool.REQ,
        aliases={"available req slots": "available", "total slots": "size"},
        figures=("available", "size"),
    ),
    LeakFormat(
        "kv-warning-0.3",
        "0.3.x-0.4.5",
        _KV,
        re.compile(r"KV cache pool leak detected!"),
        pool=Pool.FULL,
        available_includes_evictable=True,
        figures=("available_with_evictable", "size"),
    ),
    LeakFormat(
        "req-warning-0.3",
        "0.3.x-0.4.5",
        _KV,
        re.compile(r"Memory pool leak detected!"),
        pool=Pool.REQ,
        figures=("available", "size"),
    ),
    LeakFormat(
        "kv-allocator-0.4.6",
        "0.4.6-0.4.x",
        _KV,
        re.compile(r"token_to_kv_pool_allocator memory leak detected! ?available_size=\d+, protected_size="),
        pool=Pool.FULL,
        available_includes_evictable=True,
        figures=("available_with_evictable", "protected", "size"),
    ),
    LeakFormat(
        "req-pool-0.4.6",
        "0.4.6-current",
        _KV,
        re.compile(r"req_to_token_pool memory leak detected!"),
        pool=Pool.REQ,
        figures=("available", "size"),
    ),
    LeakFormat(
        "kv-allocator-0.5",
        "0.5.0-0.5.10",
        _KV,
        re.compile(r"token_to_kv_pool_allocator memory leak detected!"),
        figures=("size", "available", "evictable", "protected"),
    ),
    LeakFormat(
        "pools-0.5.12",
        "0.5.12-current",
        _KV,
        re.compile(r"[\w\-]+ memory leak detected!"),
        figures=_TAGGED_FIGURES,
    ),
    LeakFormat(
        "busy-pools-0.5.12",
        "0.5.12-current",
        _BUSY,
        re.compile(r"(?:Full|SWA) Pool Mem Leak Detected!"),
        figures=_TAGGED_FIGURES,
    ),
    LeakFormat(
        "busy-0.5.4",
        "0.5.4-0.5.10",
        _BUSY,
        re.compile(r"(?<!Pool )Mem Leak Detected!"),
        figures=("accounted", "size"),
    ),
    LeakFormat("radix-sanity-0.5", "0.5.0-0.5.22", _TREE, re.compile(r"\w* ?Radix tree sanity check failed")),
    LeakFormat(
        "tree-sanity-0.5.23", "0.5.23-current", _TREE, re.compile(r"Sanity check FAILED \(\d+ violations")
    ),
)

# A scheduler process died (0.2.x named its processes; 0.4.0+ says "<Process> hit an exception").
CRASH_MARKERS: tuple[tuple[str, str], ...] = (
    ("Scheduler hit an exception", "0.4.0-current"),
    ("Exception in ModelTpServer", "0.2.x"),
    ("Exception in run_tp_server", "0.2.x"),
)

# Batch statistics lines: their heads (the ``key: value`` items follow, after ``, `` or ``. ``).
#   "new fill batch. #seq: 1. #cached_token: 0. #new_token: 9. ..."       0.1.x (prefill only)
#   "Prefill batch. #new-seq: 1, ..." / "Decode batch. #running-req: 3, ..."  0.2.x-0.5.3
#   "Prefill batch(mixed #running-req: 2). #new-seq: 1, ..."              0.2.x (mixed chunk)
#   "Prefill batch, ..." / "Decode batch [1203], ..."                     0.5.4-current
BATCH_HEADS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?P<kind>Prefill|Decode) batch(?: \[(?P<iter>\d{1,12})\])?(?:, |\. |\(mixed [^)]*\)\. )"),
    re.compile(r"new (?P<kind>fill) batch\. (?P<iter>)"),
)

# Items that reveal a PD role, per family.  0.4.6-0.5.2 prefill: "#unbootstrapped-req",
# "#transferring-req"; 0.5.3+ prefill: "#prealloc-req" + "#inflight-req" ("#bootstrap-req" in
# 0.5.23); decode: "#transfer-req", "pre-allocated usage", "#retracted-req".
ROLE_KEYS: Mapping[str, str] = {
    "#unbootstrapped-req": "prefill",
    "#transferring-req": "prefill",
    "#inflight-req": "prefill",
    "#bootstrap-req": "prefill",
    "#transfer-req": "decode",
    "pre-allocated usage": "decode",
    "#retracted-req": "decode",
}

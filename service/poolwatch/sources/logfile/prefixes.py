"""What collectors and launchers put in front of an engine's own line, taken off.  Pure.

An engine writes ``[2025-10-31 10:40:43 TP0] Decode batch ...`` or ``(EngineCore_DP0 pid=12) INFO
10-31 10:40:43 [core.py:720] ...``; by the time a person pastes it, or the sidecar reads it, other
programs may have put their own prefix in front, one or several deep::

    2025-10-31T10:40:43.123456789Z stdout F <line>            Kubernetes (CRI), containerd
    2025-10-31T10:40:43.331095044Z <line>                     docker logs --timestamps, GitHub Actions
    {"log":"<line>\\n","stream":"stdout","time":"..."}         docker's json-file driver
    Aug 19 18:34:30 host vllm[8707]: <line>                   journald / syslog (short format)
    runner-llm-1  | <line>                                    docker compose
    2025-01-01 10:00:00.123 | INFO     | mod:fn:42 - <line>   a host app's loguru
    2024-12-20 00:49:31,004 - app.llm - INFO - <line>         a host app's logging default format
    2024-10-07T22:54:54,595 [INFO ] W-9000-m-stdout MODEL_LOG - <line>   TorchServe
    2025-10-31T10:40:43.1Z INFO <line>                        a launcher's ISO time and level

plus ANSI colour codes anywhere, NUL bytes (``copytruncate``'s hole) and a ``\\r`` line end.
:func:`strip` takes them off (each kind counted by name) and says whether the collector marked the
line *partial* (CRI ``P``, a json-file record without its newline): its rest comes in the next record.
What the engine itself writes first (its time, ranks, process tag) is the dialect's, never taken here:
a dialect whose own prefix begins like a collector's (an RFC 3339 time, as Rust's ``tracing`` and
Go's loggers print) names it (``keep``), and the peeling stops where the rest is the engine's line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["Stripped", "strip"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]?")
_RFC3339 = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?"
_LEADS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cri", re.compile(rf"{_RFC3339} (?:stdout|stderr) (?P<cri>[FP]) ")),
    ("launcher", re.compile(rf"{_RFC3339} (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +")),
    ("torchserve", re.compile(rf"{_RFC3339} \[[A-Z]+ ?\] \S{{1,200}} MODEL_LOG - ")),
    ("timestamp", re.compile(rf"{_RFC3339} ")),
    (
        "loguru",
        re.compile(
            r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[.,]\d{1,6} \| [A-Z]+ *\| [\w.<>\-]{1,200}:\S{1,200} - "
        ),
    ),
    (
        "logging",
        re.compile(
            r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [\w.\-]{1,200} - "
            r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
        ),
    ),
    (
        "journald",
        re.compile(
            r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d "
            r"[\w.\-]{1,255} [\w.\-/@]{1,255}(?:\[\d{1,10}\])?: "
        ),
    ),
    ("compose", re.compile(r"[\w.\-]{1,128} +\| ")),
)
_MONTHS = frozenset(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"])
_ENGINE_FIRST = frozenset("[(")  # what an engine's own line starts with (SGLang's time, vLLM's tag)
_DEPTH = 4  # prefixes nest (journald around CRI around a launcher), never deeper than this


# one per line: not frozen, which costs five times as much to build (benchmarks/bench_replay.py);
# never changed once made
@dataclass(slots=True)
class Stripped:
    text: str
    kinds: tuple[str, ...] = ()  # what was taken off, outermost first ("cri", "ansi", ...)
    partial: bool = False  # the collector says the line goes on in its next record


def strip(line: str, keep: re.Pattern[str] | None = None) -> Stripped:
    """``line`` without its line end and every collector's or launcher's prefix (none of the engine's
    own: peeling stops where ``keep``, the start of the engine's own prefix, matches)."""
    text = line.rstrip("\n")
    if text[:1] in _ENGINE_FIRST and "\x1b" not in text and text[-1:] != "\r":
        return Stripped(text)  # an engine's own line as most are: no lead of ours starts with "[" or "("
    kinds: list[str] = []
    if text.endswith("\r"):
        text = text.rstrip("\r")
    if text[:1] == "\x00":
        text = text.lstrip("\x00")
        kinds.append("nul")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
        kinds.append("ansi")
    partial = False
    for _ in range(_DEPTH):
        if not _maybe_lead(text) or (keep is not None and keep.match(text)):
            break
        if text[:8] == '{"log":"':
            decoded = _docker_json(text)
            if decoded is None:
                break
            text, more = decoded
            partial = partial or more
            kinds.append("docker-json")
            continue
        found = _lead(text)
        if found is None:
            break
        kind, match = found
        partial = partial or match.groupdict().get("cri") == "P"
        text = text[match.end() :]
        kinds.append(kind)
    return Stripped(text, tuple(kinds), partial)


def _maybe_lead(text: str) -> bool:
    """A cheap test before the patterns: most engine lines start with ``[``, ``(`` or a level."""
    first = text[:1]
    if first.isdigit() or first == "{":
        return True
    if text[:3] in _MONTHS and text[3:4] == " ":
        return True
    return "| " in text[:130]


def _lead(text: str) -> tuple[str, re.Match[str]] | None:
    for kind, pattern in _LEADS:
        m = pattern.match(text)
        if m is not None:
            return kind, m
    return None


def _docker_json(text: str) -> tuple[str, bool] | None:
    """The ``log`` field of one json-file record and whether it lacks its newline (a split line)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, str):
        return None
    return log.rstrip("\n").rstrip("\r"), not log.endswith("\n")

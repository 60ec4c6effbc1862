"""vLLM's log dialect: what its lines look like, its records, its marks -- one object.

The neutral pipeline (:mod:`poolwatch.sources.logfile`) reads vLLM's log through :data:`DIALECT`:
its ``(process pid=N) LEVEL MM-DD HH:MM:SS [file:line]`` prefix (:mod:`~poolwatch.sources.vllm.log.lines`),
the statistics parts a wrapped piece carries, how its messages span lines (every line of a message
repeats the prefix; a process tag without a prefix joins that process's record), two statistics
lines printed without a newline between them (a reporter's paste), what its records say
(:mod:`~poolwatch.sources.vllm.log.events`) and what marks a line as vLLM's.
"""

from __future__ import annotations

import re

from poolwatch.sources.logfile.assembler import Wraps
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import Framing
from poolwatch.sources.vllm.log.events import interpret, marks
from poolwatch.sources.vllm.log.formats import FATAL, opens_record
from poolwatch.sources.vllm.log.lines import VllmReader, message_of, rank_of, split_tag
from poolwatch.sources.vllm.log.stats import parse_stats_line

__all__ = ["DIALECT", "unglue"]

# a statistics line's end ("... hit rate: 0.0%") right before another line's prefix
_GLUE = re.compile(
    r"%(?=(?:\([^()\n]{1,90} pid=\d{1,10}\) )?"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d )"
)


def _tag(text: str) -> tuple[str | None, Ranks | None, str]:
    process, rest = split_tag(text)
    return process, (rank_of(process) if process is not None else None), rest


def unglue(text: str) -> list[str]:
    """Lines printed without a newline between them, split where a whole statistics line ends and
    another line's prefix begins (nothing else is split: a request's text never cuts a line)."""
    if "%" not in text:
        return [text]
    pieces, start = [], 0
    for m in _GLUE.finditer(text):
        before = text[start : m.end()]
        message = message_of(before)
        if message is not None and parse_stats_line(message) is not None:
            pieces.append(before)
            start = m.end()
    return [*pieces, text[start:]] if pieces else [text]


DIALECT = LogDialect(
    engine="vllm",
    reader=VllmReader,
    interpret=interpret,
    marks=marks,
    wraps=Wraps(
        fields=re.compile(r"[A-Za-z][A-Za-z ]{0,40}: -?\d|Engine \d{1,6}:|Engines Aggregated:"),
        markers=tuple(marker for marker, _ in FATAL),
    ),
    framing=Framing(repeats_head=True, tag=_tag, opens_record=opens_record),
    unglue=unglue,
    holders="engines",
    stall_bugs=("V09", "V16"),
)

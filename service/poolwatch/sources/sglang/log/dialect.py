"""SGLang's log dialect: what its lines look like, its records, its marks -- one object.

The neutral pipeline (:mod:`poolwatch.sources.logfile`) reads SGLang's log through :data:`DIALECT`:
its ``[time ranks]`` prefix (:mod:`~poolwatch.sources.sglang.log.lines`), the figures a wrapped
piece of its batch lines and reports carries, how its messages span lines (continuation lines carry
no prefix; another rank's line inside a traceback is an interjection), what its records say
(:mod:`~poolwatch.sources.sglang.log.events`) and what marks a line as SGLang's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from poolwatch.sources.logfile.assembler import Wraps
from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.heads import Ranks
from poolwatch.sources.logfile.records import TRACEBACK, Framing
from poolwatch.sources.sglang.log.events import CRASH_STARTS, interpret, marks
from poolwatch.sources.sglang.log.formats import LeakFormat
from poolwatch.sources.sglang.log.leak_message import report_at
from poolwatch.sources.sglang.log.lines import SglangReader, alone, ray_tag, salvage

__all__ = ["DIALECT"]

# the reports' markers, whole, for joining one a terminal cut in two
REPORT_MARKERS = (
    "token_to_kv_pool_allocator memory leak detected!",
    "req_to_token_pool memory leak detected!",
    "pool memory leak detected!",
    "KV cache pool leak detected!",
    "Memory pool leak detected!",
    "Pool Mem Leak Detected!",
    "Mem Leak Detected!",
)


def _tag(text: str) -> tuple[str | None, Ranks | None, str]:
    return None, None, ray_tag(text)  # a Ray actor's tag names no rank: the line continues the record


def _multiline(message: str) -> bool:
    """A message that goes on over lines of its own: a traceback or a report, never an interjection."""
    return TRACEBACK in message or report_at(message) is not None


def _prefixed_release(lines: Sequence[str]) -> bool:
    """A report in a format only releases that write rank prefixes use (0.2.x on)."""
    return any(isinstance(fmt := report_at(line), LeakFormat) and fmt.prefixed for line in lines)


DIALECT = LogDialect(
    engine="sglang",
    reader=SglangReader,
    interpret=interpret,
    marks=marks,
    wraps=Wraps(
        fields=re.compile(  # a batch line's items, a report's name=number fields, or their heads
            r"(?:#[\w \-]{1,30}|\b[a-z][a-z ()/_]{1,40}): -?\d|[A-Za-z_][\w.()]*=-?\d"
            r"|(?:Prefill|Decode) batch|memory leak detected!|Mem Leak Detected!|Warning: "
        ),
        markers=(*CRASH_STARTS, *REPORT_MARKERS),
        alone=alone,
    ),
    framing=Framing(tag=_tag, salvage=salvage, multiline=_multiline, prefixed_only=_prefixed_release),
    holders="ranks",
    stall_bugs=("S14",),
)

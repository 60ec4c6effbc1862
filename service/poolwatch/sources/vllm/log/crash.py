"""What a vLLM traceback says: the exception raised and the block-pool frame that raised it.  Pure.

EngineCore logs its death as ``EngineCore encountered a fatal error.`` and the traceback, e.g. a
block freed twice and later handed out again (0.32.0)::

      File ".../vllm/v1/core/single_type_kv_cache_manager.py", line 405, in allocate_new_blocks
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks)
      File ".../vllm/v1/core/block_pool.py", line 690, in get_new_blocks
        assert block.ref_cnt == 0
               ^^^^^^^^^^^^^^^^^^
    AssertionError

The crash text poolwatch keeps puts what matters on its first line, then the traceback's tail
(the frames nearest the fault, the exception), bounded::

    EngineCore encountered a fatal error. [AssertionError at v1/core/block_pool.py:690 in
    get_new_blocks: assert block.ref_cnt == 0]

The *pool frame* is the deepest frame in vLLM's KV-cache bookkeeping (``vllm/v1/core/``, the
scheduler's ``sched/`` excepted): ``block_pool.py`` (``get_new_blocks``' assert, ``touch``),
``kv_cache_utils.py`` (the free queue's ``popleft``/``remove``: ``remove() called on an invalid
block``), the managers.  A crash raised there is vLLM's own check catching its block accounting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from poolwatch.sources.logfile.events import PoolError
from poolwatch.sources.vllm.log.errors import CRASH_RULES

__all__ = ["MAX_TEXT", "Crash", "Frame", "crash_error", "crash_text", "read_crash"]

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line (?P<line>\d{1,7}), in (?P<func>[\w<>.]{1,200})')
_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::[ \t]?(.*))?$")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Frame:
    path: str  # from "vllm/" on when it is vLLM's, e.g. "v1/core/block_pool.py"
    line: int
    func: str
    code: str  # the source line Python printed under it ("" when none)

    def __str__(self) -> str:
        code = f": {self.code}" if self.code else ""
        return f"{self.path}:{self.line} in {self.func}{code}"


@dataclass(frozen=True, slots=True)
class Crash:
    exception: str  # the last "<Name>Error: ..." line ("" when the text names none)
    frame: Frame | None  # the pool frame, else the deepest frame
    in_pool: bool  # the frame is in vLLM's KV-cache bookkeeping
    frames: tuple[Frame, ...] = ()  # every frame, outermost first

    def headline(self, first: str) -> str:
        """``first`` (vLLM's own line) with the exception and frame after it, in brackets."""
        said = [p for p in (self.exception, f"at {self.frame}" if self.frame else "") if p]
        return f"{first} [{' '.join(said)}]" if said else first


def read_crash(lines: Sequence[str]) -> Crash:
    """The exception and the frame of a traceback's lines (any text: nothing found is ``""``)."""
    exception, frames = "", []
    for i, line in enumerate(lines):
        stripped = line.rstrip()
        if (m := _RAISED.match(stripped)) is not None:
            exception = f"{m[1]}: {m[2]}" if m[2] else m[1]
        elif (f := _FRAME.match(stripped)) is not None:
            frames.append(Frame(_short(f["path"]), int(f["line"]), f["func"], _code(lines, i + 1)))
    pool = [f for f in frames if f.path.startswith("v1/core/") and not f.path.startswith("v1/core/sched/")]
    frame = pool[-1] if pool else (frames[-1] if frames else None)
    return Crash(exception[:300], frame, bool(pool), tuple(frames))


def crash_error(crash: Crash) -> PoolError | None:
    """The pool error a crash is, by the first rule its exception or a statement matches; an
    unnamed assert raised in the block bookkeeping is still a pool error of no known class."""
    texts = [crash.exception, *(f.code for f in crash.frames if f.code)]
    funcs = {f.func for f in crash.frames}
    for rule in CRASH_RULES:
        if (not rule.func or rule.func in funcs) and any(rule.text.search(t) for t in texts if t):
            return PoolError(rule.cls, rule.what, bugs=rule.bugs, proven=rule.proven)
    return None


def crash_text(lines: Sequence[str]) -> str:
    """The incident text of a crash record: its headline, then the traceback's tail (bounded)."""
    crash = read_crash(lines)
    head = crash.headline(lines[0] if lines else "")[:MAX_TEXT]
    body = [line for line in lines[1:] if not _CARETS.match(line)]
    kept: list[str] = []
    room = MAX_TEXT - len(head)
    for line in reversed(body):
        if len(line) + 1 > room:
            break
        kept.append(line)
        room -= len(line) + 1
    return "\n".join([head, *reversed(kept)])


def _short(path: str) -> str:
    at = path.rfind("/vllm/")
    return path[at + len("/vllm/") :] if at >= 0 else path.rsplit("/", 1)[-1]


def _code(lines: Sequence[str], i: int) -> str:
    if i < len(lines) and not _FRAME.match(lines[i]) and lines[i].startswith("    "):
        return lines[i].strip()[:200]
    return ""

"""The engine's call site of a finding or a guard action: the engine's own frames, captured once.

When guard refuses a free, or a tripwire is found, the one fact an engine maintainer needs is the
line of engine code that made the wrong free.  :meth:`CallSites.capture` walks the Python frames
above its caller (``sys._getframe``, then ``f_back``) and keeps the *engine's*: frames whose module
is the engine's package or below it (``Engine.package``: ``sglang``, ``vllm``), innermost first.
The probe's own frames and every other package's (torch, the standard library, a test driver) are
passed over.  At most :data:`MAX_ENGINE_FRAMES` engine frames are kept, and the walk stops after
:data:`MAX_WALK` frames in all.

What a frame gives: its file relative to the directory holding the engine's package
(``sglang/srt/mem_cache/memory_pool.py``; a file outside it shows its base name only, so no absolute
path and no user name reaches a page), its current line and its code's qualified name.  Never a
local, an argument or anything a request carries.

Where the probe stood (:class:`~poolwatch.model.findings.CallSiteKind`): when the frame the innermost
engine frame called is one of the scheduler hooks' wrappers (:mod:`~poolwatch.probe.core.hooks`),
the finding was made at a hook, after the fact (``hook``: the frames say where the engine called
that hook, not where it freed); otherwise the capture ran inside an engine call the probe wraps (a
free), and the innermost frame is the line that called it (``free``, or the caller's ``kind``).

Cost: only on a finding or a guard action, never on the healthy path; the recorders
(:mod:`~poolwatch.probe.core.tripwires`, :mod:`~poolwatch.probe.core.repairs`) capture once per
finding, not per repeat.  One capture is a walk of at most 40 frames with one dict lookup and one
string test each, and, per engine frame kept, its current line and one lookup of the frame made
for that line before (``benchmarks/bench_call_site.py``: 7 -- 15 µs on a shared 2-CPU VM).
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

from poolwatch.model.findings import CallSite, CallSiteKind, Frame
from poolwatch.probe.core import hooks

__all__ = ["MAX_ENGINE_FRAMES", "MAX_WALK", "CallSites"]

MAX_ENGINE_FRAMES = 8  # engine frames kept per call site
MAX_WALK = 40  # frames walked in all (the probe's own, a decorator's, the engine's)
_MEMO = 1024  # lines of engine code whose frame is remembered
_HOOKS_FILE = hooks.__file__


class CallSites:
    """The call-site capture of one probe, for the engine whose package is ``package`` ("" : none)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self._prefix = f"{package}."
        self._root: str | None = None  # the directory holding the package, found at the first capture
        self._frames: dict[tuple[CodeType, int], Frame] = {}  # a line of code seen before: its frame

    def capture(self, seq: int, kind: CallSiteKind = CallSiteKind.FREE) -> CallSite | None:
        """The engine's frames above the caller, innermost first, at iteration ``seq``; ``None`` when
        there are none (a keepalive thread, a test driving the probe by hand).  ``kind``: what the
        capture is when it was not made at a hook (a hook is seen and said)."""
        if not self.package:
            return None
        frame: FrameType | None = sys._getframe(1)
        callee: FrameType | None = None
        frames: list[Frame] = []
        for _ in range(MAX_WALK):
            if frame is None:
                break
            name = frame.f_globals.get("__name__", "")
            if name == self.package or (type(name) is str and name.startswith(self._prefix)):
                if not frames and callee is not None and callee.f_code.co_filename == _HOOKS_FILE:
                    kind = CallSiteKind.HOOK
                frames.append(self._frame(frame))
                if len(frames) >= MAX_ENGINE_FRAMES:
                    break
            callee, frame = frame, frame.f_back
        return CallSite(kind, tuple(frames), seq) if frames else None

    def _frame(self, frame: FrameType) -> Frame:
        code, line = frame.f_code, frame.f_lineno or 0
        known = self._frames.get((code, line))
        if known is None:
            if len(self._frames) >= _MEMO:
                self._frames.clear()
            known = self._frames[code, line] = Frame(self._file(code.co_filename), line, code.co_qualname)
        return known

    def _file(self, path: str) -> str:
        """``path`` relative to the directory holding the engine's package; else its base name."""
        if self._root is None:
            self._root = _package_root(self.package)
        if self._root and path.startswith(self._root):
            return path[len(self._root) :].replace(os.sep, "/")
        return os.path.basename(path)


def _package_root(package: str) -> str:
    """The directory that holds ``package`` (with a trailing separator); "" when it is not imported."""
    module = sys.modules.get(package)
    paths = list(getattr(module, "__path__", None) or ())
    return os.path.dirname(os.path.abspath(paths[0])) + os.sep if paths else ""

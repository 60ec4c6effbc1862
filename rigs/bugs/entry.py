"""One entry of the real-bug suite: a real bug of an engine's tracker, driven through its upstream
trigger on a release it shipped in, and on the release that fixed it (the control).

An entry is a module ``rigs/bugs/<engine>/<id lowercase>.py`` (``rigs/bugs/sglang/s03.py``) with

* ``BUG: Bug`` -- what the bug is (:class:`Bug`: the zoo's id, the issue, the fix, its class, the
  releases it runs on, the trigger in one line);
* ``def run(release: str) -> dict[str, Any]`` -- the trigger driven on ``release`` (``BUG.affected``
  or ``BUG.fixed``; ``"<affected>+fix"`` names the affected release with the fix applied), inside
  that release's venv (:mod:`rigs.bugs.runner` starts it there, one process a run), returning
  :func:`outcome`: the :class:`~rigs.timeline.Timeline`'s row plus the release and whether the
  wrong act happened (``struck``).

An entry module imports only the standard library and this module at its top: the catalogue reads
``BUG`` under the checkout's ``.venv``, where no engine is installed; the engine, the driver and the
probe are imported inside ``run``.  Stdlib only.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ENGINES", "FIX_SUFFIX", "Bug", "BugClass", "outcome"]

ENGINES = ("sglang", "vllm")
FIX_SUFFIX = "+fix"  # BUG.fixed == BUG.affected + FIX_SUFFIX: the control is the fix applied
_ID = re.compile(r"[SV]\d\d")  # the zoo's ids (docs: /work/shared/bug-zoo.md): S03, V01


class BugClass(enum.StrEnum):
    """What the bug does to the books (the table's class column)."""

    DOUBLE_FREE = "double-free"  # a slot or block freed twice, or freed while something owns it
    LEAK = "leak"  # a slot nobody owns any more
    STRANDED = "stranded"  # capacity held by an owner that no longer progresses (books balanced)
    COUNTER = "counter"  # a counter is wrong; the slots are fine
    FREED_IN_FLIGHT = "freed-in-flight"  # freed while an in-flight step or transfer still lists it
    STALL = "stall"  # requests wait, capacity is free, nothing is admitted
    UNWATCHED_POOL = "unwatched-pool"  # a pool poolwatch does not read


@dataclass(frozen=True)
class Bug:
    """A real bug, as the suite runs it."""

    id: str  # the zoo's id: "S03", "V01"
    engine: str  # "sglang" | "vllm"
    title: str  # a few words: what goes wrong
    issue: str  # the issue's (or the PR's, where there is no issue) URL
    fix: str  # the fix's URL, or ""
    bug_class: str  # one of BugClass's values
    affected: str  # the release the entry runs as affected
    fixed: str  # the control: a release, or affected + "+fix" when the control is the fix applied
    trigger: str  # one line: the upstream trigger

    def __post_init__(self) -> None:
        problems = []
        if not _ID.fullmatch(self.id) or self.id[0] != self.engine[:1].upper():
            problems.append(f"id {self.id!r} is not an {self.engine} id of the zoo (S03, V01)")
        if self.engine not in ENGINES:
            problems.append(f"engine {self.engine!r} is not one of {ENGINES}")
        if self.bug_class not in set(BugClass):
            problems.append(f"class {self.bug_class!r} is not one of {[c.value for c in BugClass]}")
        if not self.issue.startswith("https://"):
            problems.append(f"issue {self.issue!r} is no URL")
        if self.fix and not self.fix.startswith("https://"):
            problems.append(f"fix {self.fix!r} is no URL")
        if not self.affected or not self.fixed or self.affected == self.fixed:
            problems.append(f"affected {self.affected!r} and fixed {self.fixed!r} must be two releases")
        if self.fixed.endswith(FIX_SUFFIX) and self.fixed != self.affected + FIX_SUFFIX:
            problems.append(f"a fix applied runs on the affected release: {self.affected}{FIX_SUFFIX}")
        if problems:
            raise ValueError(f"bug entry {self.id}: " + "; ".join(problems))

    @property
    def module(self) -> str:
        """The entry's module: ``rigs.bugs.<engine>.<id lowercase>``."""
        return f"rigs.bugs.{self.engine}.{self.id.lower()}"

    @property
    def releases(self) -> tuple[str, str]:
        """(affected, fixed): the two runs of the entry."""
        return self.affected, self.fixed

    def base(self, release: str) -> str:
        """The engine release whose venv ``release`` runs in (the affected one for a fix applied)."""
        return release.removesuffix(FIX_SUFFIX)


def outcome(release: str, struck: bool, row: dict[str, Any]) -> dict[str, Any]:
    """What ``run`` returns: the timeline's ``row``, the release it ran on and whether the wrong act
    happened."""
    return {**row, "release": release, "struck": bool(struck)}

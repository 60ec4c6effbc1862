"""Whose log is this?  Each engine's own marks, counted over a file's first lines.  Pure.

Every line an engine writes carries marks no other program writes the same way: vLLM's prefix
``INFO 09-23 10:29:55 [core.py:702]`` and its process tags ``(EngineCore_0 pid=195)``, SGLang's
``[2025-10-31 10:40:43 TP0]`` and its batch lines.  One such line is enough: a vLLM log of
preemption notices only, or of worker start-up lines, is vLLM's.  Each dialect says what it sees in a
line (:attr:`~poolwatch.sources.logfile.dialect.LogDialect.marks`) after collectors' prefixes are
taken off; the engine with the most *strong* marks wins (then the most marks of any strength, then
the registry's order), and :class:`Evidence` keeps what decided it, for the replay's output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from poolwatch.sources.logfile.dialect import LogDialect
from poolwatch.sources.logfile.prefixes import strip

__all__ = ["Evidence", "sniff", "weigh"]

_SHOWN = 160  # characters of the first marked line kept in the evidence


@dataclass(slots=True)
class Evidence:
    """What told one engine's log apart."""

    engine: str
    lines: int = 0  # lines looked at
    strong: int = 0  # lines with a mark only this engine writes
    weak: int = 0  # lines with a shape it writes that others could too
    kinds: Counter[str] = field(default_factory=Counter)  # marks seen, by what they are
    first: tuple[int, str] | None = None  # the first strong mark: line number (1-based) and text
    others: dict[str, int] = field(default_factory=dict)  # other engines' marked lines

    def describe(self) -> str:
        """One line for people: the engine, what decided it and where."""
        kinds = ", ".join(f"{what} x{n}" for what, n in self.kinds.most_common(4))
        where = f"; first at line {self.first[0]}: {self.first[1]}" if self.first else ""
        others = "; ".join(f"{e}: {n} lines" for e, n in self.others.items()) or "no other engine's"
        return (
            f"{self.engine}, from {self.strong + self.weak} of {self.lines} lines ({kinds}){where}; {others}"
        )


def sniff(lines: Iterable[str], dialects: Sequence[LogDialect]) -> Evidence | None:
    """The evidence for the engine whose marks the most lines carry (``None``: no line is any's)."""
    found = weigh(lines, dialects)
    ranked = sorted(range(len(found)), key=lambda i: (-found[i].strong, -found[i].weak, i))
    if not ranked or not (found[ranked[0]].strong or found[ranked[0]].weak):
        return None
    best = found[ranked[0]]
    for i in ranked[1:]:
        if found[i].strong + found[i].weak:
            best.others[found[i].engine] = found[i].strong + found[i].weak
    return best


def weigh(lines: Iterable[str], dialects: Sequence[LogDialect]) -> list[Evidence]:
    """Every engine's evidence over ``lines``, in the order of ``dialects``."""
    found = [Evidence(d.engine) for d in dialects]
    count = 0
    for number, line in enumerate(lines, 1):
        count += 1
        text = strip(line).text
        for dialect, evidence in zip(dialects, found, strict=True):
            own = text if dialect.own_lead is None else strip(line, dialect.own_lead).text
            mark = dialect.marks(own)
            if mark is None:
                continue
            evidence.kinds[mark.what] += 1
            if mark.strong:
                evidence.strong += 1
                if evidence.first is None:
                    evidence.first = (number, own[:_SHOWN])
            else:
                evidence.weak += 1
    for evidence in found:
        evidence.lines = count
    return found

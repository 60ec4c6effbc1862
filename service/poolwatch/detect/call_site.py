"""An engine call site in words, for an alert's text: which line of engine code made the wrong free.

The probe captures the engine's own frames at a finding or a guard action
(:class:`~poolwatch.model.findings.CallSite`, innermost first).  An alert names at most :data:`SHOWN` of
them, each as ``…/<file name>:<line> <function>`` joined by ``←`` (the caller on the right);
the bundle and the status page show every frame with its path under the engine's package and its
qualified name.  What each kind says:

``free``       ``Freed by …/memory_pool.py:387 free ← …/prefill.py:599 process_prefill_chunk.``
``next_free``  ``The free had returned when the probe looked; the same free, caught again at
               iteration 12, is made by … .``
``hook``       ``The line that freed it is not known yet: the free had returned when the probe
               looked after process_prefill_chunk (called from …); the probe names the next
               identical free when it can.``
no site        nothing (no engine frame was on the stack: a finding of the probe's own thread, a
               test driving the engine by hand, or an older probe).

A leak (``missing``, ``ref_above_owners``) was made by no free: a hook's site says nothing about it.

Pure: text in, text out.
"""

from __future__ import annotations

from poolwatch.model.findings import LEAK_KINDS, CallSite, CallSiteKind, Frame, Repair, RepairKind, Tripwire

__all__ = ["SHOWN", "chain", "repair_site_sentence", "tripwire_site_sentence"]

SHOWN = 4  # frames an alert names; the bundle has them all


def _short(frame: Frame) -> str:
    name = frame.file.rsplit("/", 1)[-1]
    return f"…/{name}:{frame.line} {frame.function.rsplit('.', 1)[-1]}"


def chain(site: CallSite, limit: int = SHOWN) -> str:
    """The innermost ``limit`` frames, ``a ← b ← c`` (``← …`` when more were captured)."""
    shown = " ← ".join(_short(f) for f in site.frames[:limit])
    return shown + (" ← …" if len(site.frames) > limit else "")


def tripwire_site_sentence(t: Tripwire) -> str:
    """What a tripwire's call site says (see the module docstring), or "" when it has none."""
    site = t.call_site
    if site is None or not site.frames or (site.kind is CallSiteKind.HOOK and t.kind in LEAK_KINDS):
        return ""
    if site.kind is CallSiteKind.FREE:
        return f"Freed by {chain(site)}."
    if site.kind is CallSiteKind.NEXT_FREE:
        return (
            "The free had returned when the probe looked; the same free, caught again at iteration "
            f"{site.seq}, is made by {chain(site)}."
        )
    return (
        "The line that freed it is not known yet: the free had returned when the probe looked after "
        f"{t.first_seen_hook} (called from {chain(site, 2)}); the probe names the next identical "
        "free when it can."
    )


def repair_site_sentence(r: Repair) -> str:
    """Where the free a guard action acted on was called (a refusal: the free it refused), or ""
    for an action taken at a hook (the hook is in the action's own sentence)."""
    site = r.call_site
    if site is None or not site.frames or site.kind is CallSiteKind.HOOK:
        return ""
    if r.kind is RepairKind.REFUSE:
        return f"The refused free was called by {chain(site)}."
    return f"It acted inside the free called by {chain(site)}."

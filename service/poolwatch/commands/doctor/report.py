"""What ``poolwatch doctor`` found: one :class:`Check` per step of the way from an installed probe
to a scraped sidecar, each with its verdict, what it saw, and what to do about it.

The steps, in the order a probe's figures travel: ``installed`` (poolwatch in the engine's Python,
its plugin entry point, its ``.pth``), ``release`` (a release the probe reads), ``activated`` (the
engine's consent variable, no kill switch), ``directory`` (the discovery directory exists and this
user may trust it), ``attached`` (ranks announced themselves there and answer), ``discovered``
(the sidecar follows them), ``scraped`` (Prometheus has their series).  A failed check names its
:class:`Fault`, the one word a test or a script matches on.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["Check", "Fault", "Status", "exit_code", "render", "render_json"]


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"  # works, but not as it should (an unverified release, a stale file)
    FAIL = "FAIL"  # the figures cannot flow past this step
    SKIP = "skip"  # not checked from here (say how to)


class Fault(enum.StrEnum):
    NONE = ""
    NOT_INSTALLED = "not_installed"  # poolwatch or the engine is not in this Python, or no entry point
    NO_PTH = "no_pth"  # an editable install: the .pth the older SGLang releases need is missing
    UNREAD_RELEASE = "unread_release"  # a release the probe refuses, or never read
    NO_CONSENT = "no_consent"  # the engine's consent variable is not set
    DISABLED = "disabled"  # a kill switch is engaged
    WRONG_DIRECTORY = "wrong_directory"  # probes announce in one directory, the sidecar reads another
    UID_MISMATCH = "uid_mismatch"  # the directory is another user's: refused
    UNSAFE_DIRECTORY = "unsafe_directory"  # others may write it: refused
    SIDECAR_NOT_READING = "sidecar_not_reading"  # the sidecar reads no discovery directory at all
    NOT_ATTACHED = "not_attached"  # no rank announced itself
    UNREACHABLE = "unreachable"  # an announced rank does not answer
    NOT_DISCOVERED = "not_discovered"  # the sidecar does not follow (all) the ranks
    NO_SIDECAR = "no_sidecar"  # no sidecar answers where it should
    NOT_SCRAPED = "not_scraped"  # Prometheus has no series of the ranks


@dataclass(frozen=True, slots=True)
class Check:
    step: str
    status: Status
    says: str
    fix: str = ""
    fault: Fault = Fault.NONE


def exit_code(checks: Sequence[Check]) -> int:
    """0: nothing failed (warnings allowed); 1: a fault."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def render(title: str, checks: Sequence[Check]) -> str:
    """The report as the terminal shows it: one line per step, its fix indented under it."""
    lines = [title]
    for c in checks:
        named = f" [{c.fault}]" if c.fault is not Fault.NONE else ""
        lines.append(f"  {c.status:<4}  {c.step:<10}  {c.says}{named}")
        if c.fix:
            lines.append(f"{'':18}fix: {c.fix}")
    faults = [c.fault.value for c in checks if c.status is Status.FAIL]
    lines.append(f"verdict: {'faults: ' + ', '.join(faults) if faults else 'no fault found'}")
    return "\n".join(lines)


def render_json(side: str, checks: Sequence[Check]) -> str:
    doc = {
        "side": side,
        "ok": exit_code(checks) == 0,
        "checks": [{**asdict(c), "status": c.status.value, "fault": c.fault.value} for c in checks],
    }
    return json.dumps(doc, indent=1)

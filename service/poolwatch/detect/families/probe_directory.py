"""The probe directory family: the sidecar pages by itself when the directory its probes announce
themselves in is lost, or when it refuses a probe.  Pure (issue 42).

Before, PoolwatchProbeDirectoryLost was a Prometheus rule only: a directory that turned unsafe
dropped every target and the sidecar's own receivers got nothing (40 s of silence measured, and
none after); a directory refused from the start (another user's: a non-root engine in the shipped
Kubernetes layout, whose directory the sidecar's uid does not own) raised nothing at all.  Now the
sidecar judges both on its evaluation timer, from what its discovery scan found
(:class:`~poolwatch.target_state.DirectoryHealth`, made by
:meth:`poolwatch.sources.targets.TargetSet.directory_health`), and its own notifiers deliver them
like every other alert; the rules stay, for a sidecar that cannot deliver.

* **PoolwatchProbeDirectoryLost** (``reason``): a directory in which probes had announced
  themselves is unsafe now (critical, at once) or gone (warning, after a minute);
* **PoolwatchProbeRefused** (``reason``): the sidecar refuses the directory, the node's secret or a
  probe's file because someone else could have written it (``unsafe``: never read), or a dying
  rank's final snapshot does not hold (``forged``: never delivered).  Warning, at once: the ranks
  behind it are not watched.  Its text names what was refused and why, and for a directory of
  another user how to run the two (the sidecar as the engine's user, docs/security.md).

Both keep their Prometheus rules (``poolwatch_discovery_directory_lost{reason} == 1``;
``poolwatch_discovery_skipped_files{reason=~"unsafe|forged"} > 0``).
"""

from __future__ import annotations

from poolwatch.detect.alert import Signal
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Tick, first_line, uses
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.target_state import DirectoryHealth

__all__ = ["FAMILY", "PROBE_DIRECTORY_LOST", "PROBE_REFUSED", "REFUSED", "ProbeDirectoryHealth"]

PROBE_DIRECTORY_LOST = "PoolwatchProbeDirectoryLost"
PROBE_REFUSED = "PoolwatchProbeRefused"

REFUSED = ("unsafe", "forged")  # the skip reasons that refuse a probe (poolwatch.discovery.directory)
MISSING_FOR_S = 60.0
_SUBJECT = "probe-directory"


def _refused_text(health: DirectoryHealth, reason: str, names: list[str]) -> str:
    shown = "; ".join(f"{n}: {first_line(health.refused[n], 200)}" for n in names[:3])
    more = f" (and {len(names) - 3} more)" if len(names) > 3 else ""
    if reason == "forged":
        return (
            f"poolwatch refused {len(names)} final snapshot(s) in its probe directory {health.path} "
            f"that do not hold (a bad signature, another boot, a future date): {shown}{more}. Someone "
            "on the node may be forging a dying rank's last word; nothing of it was delivered."
        )
    whole = health.path in names
    what = "its probe directory" if whole else f"{len(names)} file(s) of its probe directory"
    return (
        f"poolwatch refuses {what} {health.path}: someone else could have written it, so it is never "
        f"read and the ranks behind it are not watched ({shown}{more}). If the engine runs as another "
        "non-root user, run the sidecar as that same user (securityContext.runAsUser), or the engine "
        "as root; docs/security.md says who may own what."
    )


class ProbeDirectoryHealth(Judge):
    """The family's judge: both alerts, on the timer, from the discovery scan's
    :class:`~poolwatch.target_state.DirectoryHealth`."""

    def signals(self, tick: Tick) -> list[Signal] | None:
        health = tick.directory
        if health is None:
            return None  # not judged this turn
        if not health.path:
            return []
        out = []
        if health.lost in ("unsafe", "missing"):
            unsafe = health.lost == "unsafe"
            text = f"The probe directory {health.path}, where probes had announced themselves, " + (
                "now names another directory or one another user could write: someone on the node "
                "tampered with it. The sidecar keeps reading the directory it opened; ranks that "
                "start now are not watched."
                if unsafe
                else "is gone: ranks can no longer announce themselves or leave their last word."
            )
            severity, wait = (Severity.CRITICAL, 0.0) if unsafe else (Severity.WARNING, MISSING_FOR_S)
            labels = (("reason", health.lost),)
            out.append(Signal(PROBE_DIRECTORY_LOST, _SUBJECT, severity, labels, text, 1.0, 1, wait))
        for reason in REFUSED:
            names = sorted(n for n, why in health.refused.items() if why.startswith(f"{reason}:"))
            if names:
                text = _refused_text(health, reason, names)
                labels = (("reason", reason),)
                value = float(len(names))
                out.append(Signal(PROBE_REFUSED, _SUBJECT, Severity.WARNING, labels, text, value))
        return out


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    """The two alerts' definitions (their rules, runbooks and rows: ``poolwatch generate``)."""
    del config  # fixed waits: the rules say what the judge does
    where = "{{ $labels.namespace }}/{{ $labels.pod }}"
    return (
        AlertDef(
            PROBE_DIRECTORY_LOST,
            Scope.SIDECAR,
            Mode.TIMED,
            "The directory a sidecar's probes announce themselves in was replaced or is gone: new ranks "
            "go unwatched and a dying rank's last word may not arrive.",
            "A directory in which probes had announced themselves now names another directory, one "
            "someone else could write (unsafe: another user swapped or opened it), or nothing (missing). "
            "The sidecar keeps reading the directory it opened while it exists, and pages this itself.",
            (
                PromRule(
                    Severity.CRITICAL,
                    'poolwatch_discovery_directory_lost{reason="unsafe"} == 1',
                    "0s",
                    f"The probe directory of {where}, where its probes had announced themselves, now "
                    "names another directory or one another user could write: someone on the node "
                    "tampered with it. The sidecar keeps reading the directory it opened; ranks that "
                    "start now are not watched.",
                ),
                PromRule(
                    Severity.WARNING,
                    'poolwatch_discovery_directory_lost{reason="missing"} == 1',
                    "1m",
                    f"The probe directory of {where}, where its probes had announced themselves, is "
                    "gone: ranks can no longer announce themselves or leave their last word.",
                ),
            ),
        ),
        AlertDef(
            PROBE_REFUSED,
            Scope.SIDECAR,
            Mode.TIMED,
            "A sidecar refuses its probe directory or a probe's file: the ranks behind it are not watched.",
            "The probe directory, the node's secret or a probe's discovery file is another user's or "
            "writable by others (unsafe: never read), or a final snapshot does not hold (forged: never "
            "delivered). The sidecar pages this itself; a directory of a non-root engine's user is the "
            "usual cause (run the sidecar as that user).",
            (
                PromRule(
                    Severity.WARNING,
                    'poolwatch_discovery_skipped_files{reason=~"unsafe|forged"} > 0',
                    "0s",
                    f"The poolwatch sidecar of {where} refuses {{{{ $value }}}} item(s) of its probe "
                    "directory ({{ $labels.reason }}): someone else could have written them, or a final "
                    "snapshot does not hold. The ranks behind them are not watched.",
                ),
            ),
        ),
    )


FAMILY = Family(
    name="probe_directory",
    title="Probe directory",
    about="Whether the directory the probes announce themselves in is still the one the sidecar "
    "opened, and whether the sidecar refuses a probe (the ranks behind it would go unwatched).",
    metrics=uses("poolwatch_discovery_directory_lost", "poolwatch_discovery_skipped_files"),
    alerts=alerts,
    timed=ProbeDirectoryHealth,
)

"""SGLang's spec: what only the SGLang room knows (the neutral probe does the rest).

========================  =========  ==========================================================
method (first that exists)  when     probe call
========================  =========  ==========================================================
``__init__``              after      attach (the probe is born with the scheduler)
``ingest_requests`` /     before     ``on_loop_boundary``: the previous iteration is complete
``recv_requests`` /                  (0.5.13 - 0.5.19 receive through a component, then call
``process_input_requests``           ``process_input_requests`` at the head of every loop)
``on_idle``,              before     ``on_idle``: look before SGLang's own idle check (each
``self_check_during_idle``           that exists: a release calls only its own)
``process_prefill_chunk``  after     ``after_prefill_chunk``: the #12994 tripwire
========================  =========  ==========================================================

Activation: on SGLang >= 0.5.12, :func:`sglang_plugin` is the ``sglang.srt.plugins`` entry point
``poolwatch``; it acts only when ``SGLANG_PLUGINS`` names ``poolwatch`` or ``POOLWATCH_PROBE=1``
(SGLang loads *every* installed plugin when ``SGLANG_PLUGINS`` is unset: being installed is not
consent).  Older releases are armed by the ``.pth`` file (:mod:`poolwatch.probe.lifecycle`).

Releases: every version reads as the newest family not newer than it
(:mod:`~poolwatch.probe.sglang.shapes`); one newer than the newest read is *unverified* (guard's
refusals and returns stay off there).  This module is imported at activation in every process:
the room's heavier modules load only when a scheduler gets a probe.
"""

from __future__ import annotations

from collections.abc import Mapping

from poolwatch import releases
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import Engine, Reader, Release, UnknownRelease
from poolwatch.probe.core.hooks import Hook
from poolwatch.probe.sglang.shapes import installed_version, known_release, shape_or_newest

__all__ = ["HOOKS", "SGLANG", "sglang_plugin"]

HOOKS: tuple[Hook, ...] = (
    (("ingest_requests", "recv_requests", "process_input_requests"), "before", "on_loop_boundary"),
    (("on_idle",), "before", "on_idle"),  # 0.5.12+
    (("self_check_during_idle",), "before", "on_idle"),  # up to 0.5.10
    (("process_prefill_chunk",), "after", "after_prefill_chunk"),
)


def sglang_release(override: str, installed: str | None = None) -> Release:
    """The release to read: its family from ``override`` (``POOLWATCH_ENGINE_VERSION``) when set,
    else from the installed SGLang's version; verified only when the *installed* release is a
    final release that was read (:func:`~poolwatch.probe.sglang.shapes.known_release`) and the
    override, if any, names that same release -- an override chooses how a build is read, never
    that it was read.  Where SGLang is not installed (the emulator) the override is all there is.
    :class:`~poolwatch.probe.core.engine.UnknownRelease` for an override that is no release number."""
    try:
        wanted = releases.override(override)
    except releases.BadRelease as exc:
        raise UnknownRelease(str(exc)) from None
    actual = installed_version() if installed is None else installed
    version = actual or override.strip()
    verified = known_release(version)
    if wanted is not None and actual:
        parsed = releases.parse(actual)
        verified = (
            verified
            and parsed is not None
            and releases.key(parsed, post=True) == releases.key(wanted, post=True)
        )
    return Release(version, shape_or_newest(override.strip() or version).family, verified=verified)


def _open(scheduler: object, config: ProbeConfig, release: Release, environ: Mapping[str, str]) -> Reader:
    from poolwatch.probe.sglang.reader import SglangReader

    return SglangReader(scheduler, config, release, environ)


def _consent(environ: Mapping[str, str]) -> bool:
    names = {n.strip() for n in environ.get("SGLANG_PLUGINS", "").split(",")}
    return "poolwatch" in names or environ.get("POOLWATCH_PROBE", "") == "1"


SGLANG = Engine(
    name="sglang",
    scheduler="sglang.srt.managers.scheduler:Scheduler",
    hooks=HOOKS,
    release=sglang_release,
    open=_open,
    probe="poolwatch.probe.sglang.extras:SglangProbe",
    plugin_group="sglang.srt.plugins",
    release_env="POOLWATCH_SGLANG_VERSION",
    consent=_consent,
    consent_hint="POOLWATCH_PROBE=1 (every release; the .pth activates it on 0.5.4-0.5.10) or "
    "SGLANG_PLUGINS=poolwatch (0.5.12 and newer, appended to any plugins you list)",
    pth_needed_by="SGLang 0.5.4-0.5.10 need it, 0.5.12 and newer use SGLANG_PLUGINS",
)


def sglang_plugin() -> None:
    """SGLang >= 0.5.12 general plugin (entry point group ``sglang.srt.plugins``); never raises."""
    from poolwatch.probe.lifecycle import plugin

    plugin(SGLANG.name)

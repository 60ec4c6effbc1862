"""Engine release numbers: the one parser of them (PEP 440, ``packaging.version``), for the probe's
engine rooms and the sidecar alike.

A release is *read* only when its number is a final release the room has read (its wheel's code was
read field by field): a pre-release (``0.34.0rc1``), a development build (``0.33.0.dev12+g1a2b3c``)
or a local build (``0.33.0+cu128``, ``0.5.9+rocm``) is not, whatever release it is close to, since
its code may differ from the final one's anywhere; it is read as its family *unverified* (see the
rooms' ``shapes`` modules: coarse until its checks pass, no guard).  A post-release that was
published as the release (SGLang's ``0.5.4.post1``) is final.

Every text that is not a PEP 440 version -- ``'0.34.0 junk'``, ``nightly``, an escape sequence in
a ``/version`` answer -- is no release at all: the probe refuses an override that is not one
(:func:`override`), and the sidecar shows a reported release only when it is one (:func:`shown`).

Pure; imported by the probe inside the engine (``packaging`` is pure Python, and a dependency of
both SGLang and vLLM).
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

__all__ = ["MAX_CHARS", "BadRelease", "final", "key", "override", "parse", "shown"]

MAX_CHARS = 64  # a release number is short; anything longer is not one


class BadRelease(ValueError):
    """An override that is not a release number; the message says what to set instead."""


def parse(text: str) -> Version | None:
    """``text`` as a PEP 440 version (surrounding spaces and a leading ``v`` allowed), or None."""
    if not text or len(text) > MAX_CHARS:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def final(version: Version) -> bool:
    """Whether ``version`` is a final release: no pre-release, development or local part (a
    post-release is final: it was published as the release)."""
    return not version.is_prerelease and not version.is_devrelease and version.local is None


def key(version: Version, *, post: bool = False) -> tuple[int, ...]:
    """The release's first three numbers, padded (``0.34`` -> ``(0, 34, 0)``), and with ``post``
    its post number (``0.5.5.post3`` -> ``(0, 5, 5, 3)``): what a family table compares.  A
    pre-release, development or local build has the key of the release it leads to."""
    numbers = (*version.release, 0, 0, 0)[:3]
    return (*numbers, version.post or 0) if post else numbers


def override(text: str, variable: str = "POOLWATCH_ENGINE_VERSION") -> Version | None:
    """A release override (``""``: none); :class:`BadRelease` for a text that is not a release
    number, so junk never decides what the probe reads."""
    if not text.strip():
        return None
    version = parse(text.strip())
    if version is None:
        shown_text = repr(text[:MAX_CHARS]) + ("..." if len(text) > MAX_CHARS else "")
        raise BadRelease(
            f"{variable}={shown_text} is not a release number (PEP 440: 0.34.0, 0.5.5.post3, 0.35.0rc1); "
            "the probe stays off rather than read the engine as a guess"
        )
    return version


def shown(text: object) -> str:
    """A release an engine reports (vLLM's ``/version``, SGLang's ``/get_server_info``) as it
    said it, when it is a release number; ``""`` (unknown) for anything else."""
    if not isinstance(text, str):
        return ""
    return text.strip() if parse(text.strip()) is not None else ""

"""A one-shot recorder on a free path: the call site of the *next* identical wrong free.

Some findings are made after the wrong free has returned: a tripwire that looks right after a
scheduler hook (SGLang's chunk tripwire after ``process_prefill_chunk``) finds the slot on the free
list, but the frame that freed it is gone, so its call site can only say where the hook was called
(:class:`~poolwatch.model.findings.CallSiteKind` ``hook``).  Engine faults of this kind repeat: the same line
frees the same kind of slot for every request that takes the same path.  So after such a finding an
engine room may arm a :class:`FreeWitness` on that pool's free path (an instance attribute
shadowing the method, never the class): each call asks the room's ``wrong(*args)`` -- the same
proof the finding used, read at the call -- and the first call it accepts has the engine's call
site captured (kind ``next_free``, with the iteration it was caught at), handed to ``caught``, and
every armed path is given its own method back before the free runs on.  The free itself is never
changed, refused or delayed.

Cost: nothing until a finding arms it (the healthy path never has it); while armed, one call of
``wrong`` per free of that path (a room reads one attribute chain and the freed ids); one capture
when it fires, then nothing again.  A check that raises is logged at debug and the free goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from poolwatch.model.findings import CallSite, CallSiteKind
from poolwatch.probe.core.call_site import CallSites

__all__ = ["FreeWitness"]

log = logging.getLogger("poolwatch.probe")
Wrong = Callable[..., bool]  # the free's own arguments -> is this the wrong free again?


class FreeWitness:
    """One-shot recorders on one rank's free paths (armed by an engine room, after a finding)."""

    def __init__(self, sites: CallSites, caught: Callable[[CallSite], None], seq: Callable[[], int]) -> None:
        self.sites, self.caught, self.seq = sites, caught, seq
        self._armed: list[tuple[Any, str, Callable[..., Any]]] = []
        self.fired = False  # it caught one (it is not armed again)

    @property
    def armed(self) -> bool:
        return bool(self._armed)

    def arm(self, owner: Any, name: str, wrong: Wrong) -> bool:
        """Watch ``owner.name`` (an instance's method no one has wrapped) for the first call ``wrong``
        accepts; False when there is no such method, it is wrapped already, or the witness fired."""
        original = getattr(owner, name, None)
        if self.fired or owner is None or not callable(original) or name in vars(owner):
            return False

        def watched(*args: Any, **kwargs: Any) -> Any:
            if self._armed:
                self._look(wrong, args, kwargs)
            return original(*args, **kwargs)

        setattr(owner, name, watched)
        self._armed.append((owner, name, watched))
        return True

    def _look(self, wrong: Wrong, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if not wrong(*args, **kwargs):
                return
            site = self.sites.capture(self.seq(), CallSiteKind.NEXT_FREE)
            self.fired = True
            self.disarm()
            if site is not None:
                self.caught(site)
        except Exception:
            log.debug("poolwatch witness failed", exc_info=True)

    def disarm(self) -> None:
        """Give every watched path its own method back."""
        for owner, name, watched in self._armed:
            if vars(owner).get(name) is watched:
                delattr(owner, name)
        self._armed = []

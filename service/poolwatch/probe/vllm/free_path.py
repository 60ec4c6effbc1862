"""The free path check: on a release poolwatch never read, vLLM must be seen announcing its frees
before the free-time owner check may judge one (EngineCore thread; a few dict lookups a free).

The free-time check (:mod:`~poolwatch.probe.vllm.free_check`) judges a free against the lists that
still name its blocks.  On every release read, vLLM pops a request's list (the wrapped
``pop_blocks_for_free``/``free``: :meth:`~poolwatch.probe.vllm.holders.HolderIndex.released`) before it
frees the list's blocks, so a sound free finds no list of its own request still naming them.  A
build whose free path changed -- the free made before the pop -- would find every healthy free's
blocks still listed by their own request and name each one a double free (guard, were it on, would
refuse each: a stand-in of that kind leaked 63 of 63 blocks and failed its seventh allocation).

So on an unverified release (a pre-release, a development or local build, one newer than the newest
read: :mod:`poolwatch.releases`) the owner check waits until :data:`FREES` frees in a row were each
announced by a pop before it: then the free path is the one read, and the check judges every free
after.  A free some block of which came with no pop before it fails the check for good on this
scheduler (logged once, with the release): the owner check stays off there, which costs only the
moment a premature free is named (the census walk still counts every block, and a block freed at
``ref_cnt`` 0 is still named at the free).  A verified release passes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from poolwatch.probe.vllm.holders import HolderIndex

__all__ = ["FREES", "FreePath"]

FREES = 16  # announced frees in a row that prove the free path on an unverified release
_ID = attrgetter("block_id")
log = logging.getLogger("poolwatch.probe")


class FreePath:
    """Whether the owner check may judge frees on one scheduler (see the module docstring)."""

    def __init__(self, verified: bool, release: str = "") -> None:
        self.passed = verified
        self.failed = ""
        self._seen = 0
        self._release = release

    def judges(self, blocks: Sequence[Any], index: HolderIndex) -> bool:
        """Whether this free may be judged against its owners (called before the check, which
        consumes the announcements)."""
        if self.passed:
            return True
        if self.failed:
            return False
        ids = [i for i in map(_ID, blocks) if i != index.null_id]
        if not ids:
            return False
        expected = index.expected
        if all(expected.get(i, 0) > 0 for i in ids):
            self._seen += 1
            if self._seen >= FREES:
                self.passed = True
                log.info(
                    "poolwatch probe: vLLM %s frees as the releases read do: free-time checks on",
                    self._release,
                )
            return False
        self.failed = f"a free of block {ids[0]} came with no pop before it"
        log.warning(
            "poolwatch probe: vLLM %s frees otherwise than the releases read (%s): the free-time owner "
            "check stays off on this scheduler; the census walk still counts every block",
            self._release,
            self.failed,
        )
        return False

"""A pool error an engine's log names by its text: a message of the engine's own check, an assert a
crash's traceback ends in, a warning.  Pure data; each engine's dialect lists its own
(``sources/<engine>/log/errors.py``), with the bugs of ``/work/shared/bug-zoo.md`` each may be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from poolwatch.model.rank import Pool
from poolwatch.sources.logfile.events import ErrorClass

__all__ = ["ErrorRule"]


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """One text that names a pool error.

    ``text``    the exception, a statement of the traceback, or a message;
    ``bugs``    the bug-zoo ids it may be, the likeliest first;
    ``func``    the traceback frame's function it is raised in ("" when any);
    ``proven``  False: worth a row on the timeline, proves no fault alone;
    ``files``   a warning's logger position: the source files it is written from;
    ``pool``    the pool it is about, where the text says (``None``: it does not).
    """

    name: str
    releases: str
    text: re.Pattern[str]
    cls: ErrorClass
    what: str
    bugs: tuple[str, ...] = ()
    func: str = ""
    proven: bool = True
    files: tuple[str, ...] = ()
    pool: Pool | None = None

"""The pieces of SGLang's scheduler objects every rig module builds by hand (run in the release's
venv): a constructor called with the keywords the release's signature takes (:func:`build`), and the
part of ``ScheduleBatch`` the loops touch (:class:`Batch`).  Stdlib only.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["Batch", "build"]


def build(cls: Any, **kwargs: Any) -> Any:
    """``cls(**kwargs)`` with only the keywords this release's constructor takes."""
    takes = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in takes})


class Batch:
    """The part of ``ScheduleBatch`` the loop and ``process_prefill_chunk`` touch."""

    def __init__(self, reqs: list[Any], mode: Any) -> None:
        self.reqs, self.forward_mode, self.batch_is_full = list(reqs), mode, False
        self.chunked_req: Any = None

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def filter_batch(self, chunked_req_to_exclude: Any = None, **_: Any) -> None:
        drop = chunked_req_to_exclude
        drop = drop if isinstance(drop, list) else [drop]
        self.reqs = [r for r in self.reqs if not r.finished() and all(r is not d for d in drop)]

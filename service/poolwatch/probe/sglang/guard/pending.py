"""Who owns a request's slots *at the free* on a PD rank: a transfer still pending.

On a PD prefill rank a request on ``disagg_prefill_inflight_queue``
has its KV and Mamba state read by the transfer engine until SGLang polls it done or failed and
releases it, inside ``process_disagg_prefill_inflight_queue`` (or
``handle_inflight_transfer_failure``).  On a decode rank a request on the transfer queue
(``disagg_decode_transfer_queue.queue``) has its pre-allocated row and Mamba slot written by the
transfer engine until ``pop_transferred`` commits it (or releases it, failed or aborted; an
aborted one may wait in ``_deferred_releases`` until the sender drains), and a request on the
pre-allocation queue holds what ``pop_preallocated`` gave it; SGLang moves and releases them
inside those queue methods (``process_decode_queue`` and the queues' own ``pop_*``,
``resolve_deferred_releases``, ``resume_retracted_reqs``, ``release_memory_occupation``).  All
are wrapped on the instance as SGLang's own window; outside it, a free through such a request's
row, or of its Mamba slot, is refused whole (S20 / S21's class on either side: a release while
the transfer still reads or writes the slots), and the real release later frees them once.  The
queues' requests are indexed once per queue change (a list replaced or resized), not per free.

Cost per healthy free: a dict read of each queue attribute and a length and identity read of
each queue, the index rebuilt only when a queue changed; see
``benchmarks/bench_guard.py --free-path --real``.
"""

from __future__ import annotations

from typing import Any

from poolwatch.probe.sglang.guard.patch import Depth, Patch, patch

__all__ = ["Pending"]

_WINDOW = (  # the scheduler's own processing of its pending queues
    "process_disagg_prefill_inflight_queue",
    "handle_inflight_transfer_failure",
    "process_decode_queue",
)
# a decode rank's queue objects: (scheduler attribute, its lists of pending entries, its methods
# that release or move them -- SGLang's own window)
_DECODE: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "disagg_decode_transfer_queue",
        ("queue", "_deferred_releases"),
        ("pop_transferred", "resolve_deferred_releases", "release_memory_occupation", "_release_request"),
    ),
    (
        "disagg_decode_prealloc_queue",
        ("queue",),
        ("pop_preallocated", "resume_retracted_reqs", "release_memory_occupation"),
    ),
)


def _path(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
    return obj


class Pending:
    """Requests whose PD transfer is pending, outside SGLang's own processing of their queue; their
    rows and Mamba slots (installed only in guard mode).

    A prefill rank's ``disagg_prefill_inflight_queue`` (its requests' KV still read), and a decode
    rank's queues (:data:`_DECODE`): the transfer queue's entries (their KV and state still written
    by the transfer engine until ``pop_transferred`` commits or releases them), its deferred
    releases (an aborted transfer not yet drained) and the pre-allocation queue's entries.  The
    queue objects may be made after the scheduler (each is looked up at the free, its window
    methods wrapped when first seen there or at a census)."""

    def __init__(self, sched: Any, slot: tuple[str, ...], row: tuple[str, ...] = ("req_pool_idx",)) -> None:
        self.sched, self.slot, self.row = sched, slot, row
        self.depth = Depth()  # SGLang's own window in progress
        self.patches: list[Patch] = []
        # the queue lists indexed: each list's id, length and end entries' ids, the objects pinned
        # meanwhile (a list SGLang replaced and freed can come back at the same address with the
        # same length and other requests in it: an (id, len) key took it for unchanged, and read a
        # request long landed as still pending; a pinned object's id is its own)
        self.seen: tuple[tuple[int, int, int, int], ...] = ()
        self.pins: tuple[tuple[Any, Any, Any], ...] = ()
        self.reqs: dict[int, Any] = {}  # id(req) -> req
        self.slots: dict[int, Any] | None = None  # Mamba slot -> req (built on a Mamba free)
        self.rows: dict[int, Any] | None = None  # request row -> req (built on a KV free)
        self.holders: dict[str, Any] = {}  # decode queue attribute -> the queue object wrapped
        # where the queues hang (SGLang sets them on the instance; a scheduler without a __dict__
        # is read through a view of its attributes)
        fields = getattr(sched, "__dict__", None)
        self.fields: Any = fields if isinstance(fields, dict) else _Attrs(sched)

    def install(self) -> bool:
        """On a PD rank (an inflight queue, or a decode queue attribute): wrap SGLang's windows on
        the scheduler; False on a rank with neither."""
        sched = self.sched
        prefill = isinstance(getattr(sched, "disagg_prefill_inflight_queue", None), list)
        if not prefill and not any(hasattr(sched, name) for name, _, _ in _DECODE):
            return False
        for name in _WINDOW:
            self._wrap(sched, name)
        self.see()
        return True

    def see(self) -> None:
        """Wrap the windows of decode queue objects made since (at install, and at each census:
        before SGLang's own processing of a queue first runs)."""
        self._decode_lists()

    def _wrap(self, owner: Any, name: str) -> None:
        done = patch(owner, name, self.depth.wrap)
        if done is not None:
            self.patches.append(done)

    def uninstall(self) -> None:
        for done in self.patches:
            done.undo()
        self.patches = []
        self.holders = {}
        self.seen, self.pins, self.reqs = (), (), {}  # (nothing of the scheduler's kept alive)

    def _decode_lists(self) -> list[Any]:
        """The decode queues' pending lists now (each queue's window wrapped on first sight)."""
        lists: list[Any] = []
        for name, attrs, window in _DECODE:
            holder = getattr(self.sched, name, None)
            if holder is None:
                continue
            if self.holders.get(name) is not holder:
                self.holders[name] = holder
                for method in window:
                    self._wrap(holder, method)
            lists.extend(getattr(holder, attr, None) for attr in attrs)
        return lists

    def active(self) -> bool:
        """Index the queues if they changed; False when nothing is pending (or inside a window)."""
        if self.depth.calls:  # (the counter itself: no __bool__ dispatch on every free)
            return False
        fields = self.fields  # the scheduler's instance attributes: a dict read, even for a missing one
        inflight = fields.get("disagg_prefill_inflight_queue")
        if fields.get("disagg_decode_transfer_queue") is None:  # a prefill or plain rank
            if not inflight:
                return False
            lists = [inflight]
        else:
            lists = [q for q in (inflight, *self._decode_lists()) if q]
            if not lists:
                return False
        key = tuple([(id(q), len(q), id(q[0]), id(q[-1])) for q in lists])  # (a list: no generator frame)
        if key != self.seen:
            self.reqs = {id(r): r for q in lists for r in map(_request, q)}
            self.slots = self.rows = None
            self.seen, self.pins = key, tuple((q, q[0], q[-1]) for q in lists)
        return True

    def holds(self, req: Any) -> bool:
        """Whether ``req``'s transfer is pending (exact: its identity on a queue)."""
        return req is not None and self.active() and id(req) in self.reqs

    def at_row(self, row: int) -> Any:
        """The pending request holding request row ``row``, or ``None`` -- read from the queues'
        requests themselves, so a row handed out without naming its request (a decode rank's
        ``alloc(n)``) is covered too."""
        if not self.active():
            return None
        if self.rows is None:
            self.rows = {}
            for req in self.reqs.values():
                held = _path(req, self.row)
                if held is not None:
                    self.rows[int(held)] = req
        return self.rows.get(row)

    def slot_map(self) -> dict[int, Any]:
        """``{Mamba working slot: its pending request}`` (empty when nothing is pending)."""
        if not self.active():
            return {}
        if self.slots is None:
            self.slots = {}
            for req in self.reqs.values():
                tensor = _path(req, self.slot)
                if tensor is not None and int(tensor.numel()) == 1:
                    self.slots[int(tensor.reshape(-1)[0])] = req
        return self.slots


def _request(entry: Any) -> Any:
    """A queue entry's request: a prefill ``Req``, a decode ``DecodeRequest`` (``.req``), or a
    deferred release's tuple (the ``DecodeRequest`` first)."""
    if type(entry) is tuple:
        entry = entry[0]
    return getattr(entry, "req", entry)


class _Attrs:
    """``get(name)`` of an object's attributes, for a scheduler that keeps no ``__dict__``."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def get(self, name: str) -> Any:
        return getattr(self.obj, name, None)

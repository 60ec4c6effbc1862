"""The vocabulary of poolwatch: who a scheduler rank is and what its pools hold.

Everything here is a frozen, typed value with no I/O, so the probe (inside SGLang's scheduler
process), the sidecar and the tests all speak the same language.  The JSON form lives in
:mod:`poolwatch.codec.snapshot`; the arithmetic in :mod:`poolwatch.conservation`.

A pool's slots are each in exactly one of these states (SGLang's own idle check, §1.2 of the
reference)::

    size == available + evictable + protected + held + session_held

``available``    on the allocator's free lists (``free_pages``/``release_pages``/``free_slots``);
``evictable``    owned by the prefix tree with no lock (could be reclaimed);
``protected``    owned by the prefix tree and locked by a live request;
``held``         owned privately by live requests (outside the tree);
``session_held`` kept by streaming sessions between turns (SGLang 0.5.10+).

A figure is ``None`` when the source could not know it (SGLang's ``/metrics`` never exports
``protected`` or ``held``).

The values live in five modules, each imported from where it is defined:
:mod:`~poolwatch.model.rank` (who a rank is, its pools' figures), :mod:`~poolwatch.model.findings`
(what the probe proved about slot ids and what guard did), :mod:`~poolwatch.model.holds` (capacity
held by owners waiting on a transfer or a lock, and since when), :mod:`~poolwatch.model.progress`
(whether the scheduler moves its queue) and :mod:`~poolwatch.model.snapshot` (one source's account
of a rank).
"""

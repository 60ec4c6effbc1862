"""The real-bug suite (issue 39): real pool bugs of SGLang's and vLLM's trackers, each driven through
its upstream trigger on a release it shipped in, the fixed release as the control, and recorded in
engine steps -- first wrong act, the probe's finding, the page, the engine's own signal.

* :mod:`rigs.bugs.entry` -- :class:`~rigs.bugs.entry.Bug` and the contract of an entry module;
* :mod:`rigs.bugs.catalog` -- the entries, found in ``rigs/bugs/<engine>/``;
* :mod:`rigs.bugs.runner` -- one entry run on one release, inside that release's venv;
* :mod:`rigs.bugs.results` -- ``rigs/bugs/results.json``, what the runs recorded;
* :mod:`rigs.bugs.table` -- the verdicts and the table generated into ``docs/bugs.md``.

``python -m rigs.bugs run [IDS...] [--engine E]`` runs entries on both their releases and records
them; ``python -m rigs.bugs table [--check]`` renders the table (``--check``: fails on drift).
"""

"""The detector families: one module per family, each declaring one
:class:`~poolwatch.detect.family.Family` named ``FAMILY`` -- its alerts (PromQL, severity, text,
runbook link), the catalogue metrics its rules read, and the judge the sidecar's detector runs.

:data:`poolwatch.detect.rules.FAMILIES` finds every module here (a module without a ``FAMILY`` is
an error, never skipped), and everything else iterates that list: the detector
(:mod:`poolwatch.detect.judges`), the generated rules, runbook index, README tables and the
dashboards' alert panels (:mod:`poolwatch.artifacts`).  What every family repeats is written once
in :mod:`poolwatch.detect.family` -- the judge's base :class:`~poolwatch.detect.family.Judge`, a held
rule (:func:`~poolwatch.detect.family.held`), per-pool verdicts
(:func:`~poolwatch.detect.family.pool_verdicts`) -- and a new family uses it.  A new family is one
module here, its runbook(s) under ``docs/runbooks/`` and its tests; ``poolwatch generate`` writes the rest
(docs/alerting.md, "Adding a detector family").
"""

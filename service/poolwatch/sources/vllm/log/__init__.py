"""Everything read from vLLM's own log: line framing per release (``lines``), records (``records``),
the table of message formats (``formats``), the statistics line (``stats``), what a crash's
traceback says (``crash``), what a record says (``events``), the per-rank fold into snapshots
(``state``), the live source (``source``) and its offline ``replay``.  The live source and replay
share every parser; following and reading the file itself is engine-neutral
(:mod:`poolwatch.sources.logfile`).
"""

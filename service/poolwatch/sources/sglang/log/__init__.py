"""Everything read from SGLang's own log: line framing (``lines``), records (``records``), the table
of message formats per release family (``formats``), what a record says (``events``,
``leak_message``), the per-rank fold into snapshots (``state``), the live source (``source``) and
its offline ``replay``.  The live source and replay share every parser; following and reading the
file itself is engine-neutral (:mod:`poolwatch.sources.logfile`).
"""

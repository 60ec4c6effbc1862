"""SGLang's log dialect: what its lines look like (``lines``), the table of its message formats per
release family (``formats``), its batch and startup lines (``batch``), its checks' reports read whole
or not at all (``leak_message``), the pool errors and bugs they name (``errors``), what a record says
(``events``) and the one object the neutral log pipeline reads it through (``dialect``).  Reading,
following, assembling, folding and replaying the log are engine-neutral (:mod:`poolwatch.sources.logfile`).
"""

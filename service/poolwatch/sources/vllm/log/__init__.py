"""vLLM's log dialect: what its lines look like per release (``lines``), the table of its messages
(``formats``), its statistics line (``stats``), what a crash's traceback says (``crash``), the pool
errors and bugs its asserts and warnings name (``errors``), what a record says (``events``) and the
one object the neutral log pipeline reads it through (``dialect``).  Reading, following, assembling,
folding and replaying the log are engine-neutral (:mod:`poolwatch.sources.logfile`).
"""

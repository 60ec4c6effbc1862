"""Everything read from SGLang's own log: line framing (``lines``), records (``records``), the table
of message formats per release family (``formats``), what a record says (``events``,
``leak_message``), the per-rank fold into snapshots (``state``), tailing with rotation (``tail``),
the live source (``source``), reading a saved, possibly compressed log (``reader``) and its offline
``replay``.  The live source and replay share every parser.
"""

"""Everything read from SGLang's own log: line framing (``lines``), message formats (``events``,
``leak_message``), the per-rank fold into snapshots (``state``), tailing with rotation
(``tail``), the live source (``source``) and the offline ``replay`` of a saved log.
"""

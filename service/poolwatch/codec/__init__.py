"""The probe <-> sidecar wire format: the versioned snapshot JSON (stdlib only).  Public face:
:mod:`poolwatch.codec.snapshot` (``dump_snapshot``, ``parse_snapshot``)."""

"""The sidecar's settings, built once at the edge from ``POOLWATCH_*`` variables and flags.  Public
face: :mod:`poolwatch.settings.sidecar` (``Settings``, ``add_flags``, ``from_args``)."""

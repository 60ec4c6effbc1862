"""``poolwatch doctor``: is the probe there, and what to fix (its command is :mod:`.command`)."""

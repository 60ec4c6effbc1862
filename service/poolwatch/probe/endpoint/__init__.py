"""The probe's loopback HTTP endpoint: I/O thread, handler threads and routes (stdlib only,
engine-neutral)."""

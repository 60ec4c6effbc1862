"""The probe <-> sidecar disk contract: one discovery file per rank, final snapshots and the
node's probe secret (stdlib only).  Public face: :mod:`poolwatch.discovery.directory`."""

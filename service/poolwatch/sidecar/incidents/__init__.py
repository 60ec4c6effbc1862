"""The incidents a sidecar has seen and their bundles for upstream bug reports (``GET /api/v1/incidents``,
``poolwatch incident export``): :mod:`.record` (one incident), :mod:`.redact` (what a bundle may say),
:mod:`.log` (the bounded, saved set), :mod:`.file` (on disk), :mod:`.export` (JSON and Markdown),
:mod:`.api` (the routes)."""

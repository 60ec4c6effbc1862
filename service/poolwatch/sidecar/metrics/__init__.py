"""The sidecar's ``/metrics``: catalogue-checked families, the collectors and the cached
exposition."""

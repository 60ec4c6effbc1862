"""vLLM read from the outside, without the probe: its own ``/metrics`` page (``metrics``, with the
pure ``gauges``) and its log (``log/``), handed to the sidecar as one spec (``engine``)."""

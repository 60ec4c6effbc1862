"""The SGLang sources room: SGLang's own ``/metrics`` (``metrics``, ``gauges``) and log (``log/``),
read when no probe is installed; :data:`~poolwatch.sources.sglang.engine.SOURCES` is its spec."""
